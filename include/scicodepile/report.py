"""What the corpus holds right now, read from the application database: the numbers behind the
SciCodePile page in the Airflow UI and the summary at the end of ``make demo``.

Everything is aggregated in SQL (group-by counts), so the report stays cheap on a large corpus; only
the handful of distinct ``stage_status`` combinations is folded in Python, because JSON columns cannot
be grouped portably on SQLite and Postgres.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from sqlalchemy import String, cast, func, select

from scicodepile.db import check_schema, session_scope
from scicodepile.db.models import (
    Annotation,
    Artifact,
    BenchmarkTask,
    EvalRun,
    File,
    Query,
    Rejection,
    Repository,
    SearchPartition,
    Snapshot,
)
from scicodepile.pipeline import STAGES
from scicodepile.settings import Settings

UNKNOWN = "(unknown)"


@dataclass
class StageCount:
    """One line of the per-stage table: ``stage`` produced ``count`` of ``item``."""

    stage: str
    item: str
    count: int
    detail: str = ""


@dataclass
class CorpusReport:
    """Corpus counts per stage, domain and language, rejection reasons and the leaderboard."""

    database: str
    stages: list[StageCount] = field(default_factory=list)
    domains: list[dict[str, Any]] = field(default_factory=list)
    languages: list[dict[str, Any]] = field(default_factory=list)
    rejections: list[dict[str, Any]] = field(default_factory=list)
    artifacts: list[dict[str, Any]] = field(default_factory=list)
    leaderboard: list[dict[str, Any]] = field(default_factory=list)
    filters: list[dict[str, Any]] = field(default_factory=list)
    dedup: dict[str, Any] = field(default_factory=dict)

    def count(self, stage: str, item: str) -> int:
        """The count of ``item`` at ``stage`` (0 when absent): handy for checks and tests."""
        return sum(s.count for s in self.stages if s.stage == stage and s.item == item)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def rejections_by_level(session: Any) -> list[dict[str, Any]]:
        """Curate rejections grouped by what was rejected (repository, file, archive member)."""
        rows = session.execute(
            select(Rejection.subject_type, Rejection.reason, func.count())
            .where(Rejection.stage == "curate")
            .group_by(Rejection.subject_type, Rejection.reason)
            .order_by(Rejection.subject_type, func.count().desc(), Rejection.reason)
        ).all()
        return [{"level": level, "reason": reason, "count": n} for level, reason, n in rows]


def corpus_report(settings: Settings) -> CorpusReport:
    """Aggregate the application database into a :class:`CorpusReport` (read-only)."""
    check_schema(settings)
    report = CorpusReport(database=str(settings.public_dict()["database_url"]))
    with session_scope(settings) as s:
        # crawl: queries, search partitions by status, candidate repositories by source
        report.stages.append(StageCount("crawl", "queries", s.scalar(select(func.count(Query.id))) or 0))
        for status, n in s.execute(
            select(SearchPartition.status, func.count()).group_by(SearchPartition.status)
        ).all():
            report.stages.append(StageCount("crawl", f"search partitions {status}", n))
        for source, n in s.execute(
            select(Repository.source, func.count()).group_by(Repository.source).order_by(Repository.source)
        ).all():
            report.stages.append(StageCount("crawl", "repositories found", n, f"source {source}"))

        # curate: repository verdicts, per-stage statuses, snapshots, files, F1 rows
        for status, n in s.execute(
            select(Repository.status, func.count()).group_by(Repository.status).order_by(Repository.status)
        ).all():
            report.stages.append(StageCount("curate", f"repositories {status}", n))
        stage_status: Counter[tuple[str, str]] = Counter()
        for raw, n in s.execute(
            select(cast(Repository.stage_status, String), func.count()).group_by(
                cast(Repository.stage_status, String)
            )
        ).all():
            for stage, status in _json_dict(raw).items():
                if stage in STAGES:  # other keys are bookkeeping (the run and config that curated it)
                    stage_status[(str(stage), str(status))] += n
        for (stage, status), n in sorted(stage_status.items()):
            report.stages.append(StageCount(stage, f"stage status {status}", n, "repositories"))
        report.stages.append(
            StageCount("curate", "snapshots", s.scalar(select(func.count(Snapshot.id))) or 0)
        )
        files_all = s.scalar(select(func.count(File.id))) or 0
        files_kept = s.scalar(select(func.count(File.id)).where(File.kept.is_(True))) or 0
        report.stages.append(StageCount("curate", "files extracted", files_all))
        report.stages.append(StageCount("curate", "files kept", files_kept))

        # annotate, benchmark, evaluate: whatever exists so far
        for kind, n in s.execute(
            select(Annotation.kind, func.count()).group_by(Annotation.kind).order_by(Annotation.kind)
        ).all():
            report.stages.append(StageCount("annotate", f"{kind} annotations", n))
        for status, n in s.execute(
            select(BenchmarkTask.status, func.count()).group_by(BenchmarkTask.status)
        ).all():
            report.stages.append(StageCount("benchmark", f"tasks {status}", n))
        for status, n in s.execute(select(EvalRun.status, func.count()).group_by(EvalRun.status)).all():
            report.stages.append(StageCount("evaluate", f"runs {status}", n))

        # by domain: repositories per domain and verdict
        by_domain: dict[str, dict[str, Any]] = {}
        for domain, status, n in s.execute(
            select(Repository.domain, Repository.status, func.count()).group_by(
                Repository.domain, Repository.status
            )
        ).all():
            row = by_domain.setdefault(domain or UNKNOWN, {"domain": domain or UNKNOWN, "total": 0})
            row[status] = row.get(status, 0) + n
            row["total"] += n
        report.domains = sorted(by_domain.values(), key=lambda r: (-r["total"], r["domain"]))

        # by language: kept files and bytes
        for language, n, size in s.execute(
            select(File.language, func.count(), func.sum(File.bytes))
            .where(File.kept.is_(True))
            .group_by(File.language)
            .order_by(func.count().desc(), File.language)
        ).all():
            report.languages.append({"language": language or UNKNOWN, "files": n, "bytes": int(size or 0)})

        # rejections by stage and reason: nothing is dropped silently
        for stage, reason, n in s.execute(
            select(Rejection.stage, Rejection.reason, func.count())
            .group_by(Rejection.stage, Rejection.reason)
            .order_by(Rejection.stage, func.count().desc(), Rejection.reason)
        ).all():
            report.rejections.append({"stage": stage, "reason": reason, "count": n})

        # per filter level (repository, file, archive member): kept, and rejected by reason
        kept_at = {
            "repository": s.scalar(select(func.count(Repository.id)).where(Repository.status == "kept")) or 0,
            "file": files_kept,
        }
        levels: dict[str, dict[str, Any]] = {}
        for row in report.rejections_by_level(s):
            level = levels.setdefault(
                row["level"], {"level": row["level"], "kept": kept_at.get(row["level"]), "rejected": {}}
            )
            level["rejected"][row["reason"]] = row["count"]
        for level_name, kept in kept_at.items():
            levels.setdefault(level_name, {"level": level_name, "kept": kept, "rejected": {}})
        report.filters = [levels[k] for k in sorted(levels, key=lambda k: (k not in kept_at, k))]

        # dedup: files that reached dedup = kept + exact + near duplicates
        dups = levels.get("file", {}).get("rejected", {})
        exact, near = dups.get("exact_duplicate", 0), dups.get("near_duplicate", 0)
        entered = files_kept + exact + near
        report.dedup = {
            "files_in": entered,
            "exact_duplicates": exact,
            "near_duplicates": near,
            "dedup_ratio": round((exact + near) / entered, 4) if entered else 0.0,
        }

        # published artifacts per stage
        validated = dict(
            s.execute(
                select(Artifact.stage, func.count())
                .where(Artifact.validated.is_(True))
                .group_by(Artifact.stage)
            ).all()
        )
        for stage, n, rows, size in s.execute(
            select(Artifact.stage, func.count(), func.sum(Artifact.rows), func.sum(Artifact.bytes))
            .group_by(Artifact.stage)
            .order_by(Artifact.stage)
        ).all():
            report.artifacts.append(
                {
                    "stage": stage,
                    "objects": n,
                    "rows": int(rows or 0),
                    "bytes": int(size or 0),
                    "validated": validated.get(stage, 0),
                }
            )

        # leaderboard: finished evaluation runs with their metrics
        for run in s.scalars(
            select(EvalRun).where(EvalRun.status == "done").order_by(EvalRun.benchmark_version, EvalRun.model)
        ).all():
            report.leaderboard.append(
                {
                    "model": run.model,
                    "benchmark": run.benchmark_version,
                    "kind": run.kind,
                    "metrics": dict(run.metrics or {}),
                }
            )
    return report


def _json_dict(raw: object) -> dict[str, Any]:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(str(raw)) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def render_text(report: CorpusReport) -> str:
    """A plain-text rendering for terminals (the end of ``make demo``)."""
    lines = [f"application database: {report.database}", "per stage:"]
    for row in report.stages:
        if row.count or row.item in ("files kept", "repositories found"):
            detail = f"  ({row.detail})" if row.detail else ""
            lines.append(f"  {row.stage:<10} {row.item:<32} {row.count:>8}{detail}")
    if report.artifacts:
        lines.append("published artifacts:")
        for a in report.artifacts:
            lines.append(
                f"  {a['stage']:<10} {a['objects']} objects, {a['rows']} rows, {a['bytes']} bytes, "
                f"{a['validated']} validated"
            )
    if report.domains:
        lines.append("repositories by domain:")
        for d in report.domains:
            rest = ", ".join(f"{k}={v}" for k, v in d.items() if k not in ("domain", "total"))
            lines.append(f"  {d['domain']:<24} {d['total']:>6}  {rest}")
    if report.languages:
        lines.append("kept files by language:")
        for lang in report.languages:
            lines.append(f"  {lang['language']:<24} {lang['files']:>6} files {lang['bytes']:>10} bytes")
    if report.filters:
        lines.append("curate filters (kept / rejected by reason):")
        for f in report.filters:
            kept = "" if f["kept"] is None else f"kept {f['kept']}; "
            rejected = ", ".join(f"{k} {v}" for k, v in f["rejected"].items()) or "none"
            lines.append(f"  {f['level']:<16} {kept}rejected: {rejected}")
    if report.dedup.get("files_in"):
        d = report.dedup
        lines.append(
            f"dedup: {d['files_in']} files in, {d['exact_duplicates']} exact and "
            f"{d['near_duplicates']} near duplicates removed, dedup ratio {d['dedup_ratio']:.4f}"
        )
    if report.rejections:
        lines.append("rejections by reason:")
        for r in report.rejections:
            lines.append(f"  {r['stage']:<10} {r['reason']:<32} {r['count']:>6}")
    if report.leaderboard:
        lines.append("leaderboard:")
        for row in report.leaderboard:
            metrics = ", ".join(f"{k}={v}" for k, v in sorted(row["metrics"].items()))
            lines.append(f"  {row['model']:<32} {row['benchmark']} {row['kind']}: {metrics}")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover
    from scicodepile.settings import load_settings

    print(render_text(corpus_report(load_settings())))
