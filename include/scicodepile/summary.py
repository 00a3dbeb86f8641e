"""A plain-text summary of what the pipeline has produced and where (end of `make demo`)."""

from __future__ import annotations

from sqlalchemy import func, select

from scicodepile.db import check_schema, session_scope
from scicodepile.db.models import Artifact, File, Rejection, Repository
from scicodepile.settings import Settings, load_settings
from scicodepile.store import open_store


def summarize(settings: Settings) -> str:
    check_schema(settings)
    store = open_store(settings)
    lines = ["SciCodePile outputs:", f"  application database: {settings.public_dict()['database_url']}"]
    lines.append(f"  object store ({store.name}): {store.location('')}")
    with session_scope(settings) as s:
        repos = dict(s.execute(select(Repository.status, func.count()).group_by(Repository.status)).all())
        files_kept = s.scalar(select(func.count()).select_from(File).where(File.kept.is_(True))) or 0
        files_all = s.scalar(select(func.count()).select_from(File)) or 0
        rejections = s.execute(
            select(Rejection.stage, Rejection.reason, func.count())
            .group_by(Rejection.stage, Rejection.reason)
            .order_by(Rejection.stage, func.count().desc())
        ).all()
        artifacts = s.execute(
            select(Artifact.stage, func.count(), func.sum(Artifact.rows), func.sum(Artifact.bytes))
            .group_by(Artifact.stage)
            .order_by(Artifact.stage)
        ).all()
    if repos:
        lines.append("  repositories: " + ", ".join(f"{k}={v}" for k, v in sorted(repos.items())))
    if files_all:
        lines.append(f"  files: {files_kept} kept of {files_all}")
    for stage, count, rows, size in artifacts:
        lines.append(f"  artifacts[{stage}]: {count} objects, {rows or 0} rows, {size or 0} bytes")
    for stage, reason, count in rejections:
        lines.append(f"  rejected[{stage}] {reason}: {count}")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarize(load_settings()))
