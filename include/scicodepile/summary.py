"""Where the pipeline's outputs are (end of ``make demo``): database, object store, F1 prefixes.

The counts themselves are in :mod:`scicodepile.report`; this lists the places to look.
"""

from __future__ import annotations

from sqlalchemy import func, select

from scicodepile.db import check_schema, session_scope
from scicodepile.db.models import Artifact
from scicodepile.settings import Settings, load_settings
from scicodepile.store import open_store


def summarize(settings: Settings) -> str:
    """Lines naming each output location, with the artifact prefixes published per stage."""
    check_schema(settings)
    store = open_store(settings)
    lines = [
        "SciCodePile outputs:",
        f"  application database: {settings.public_dict()['database_url']}",
        f"  object store ({store.name}): {store.location('')}",
    ]
    with session_scope(settings) as s:
        keys = s.execute(select(Artifact.stage, Artifact.key).order_by(Artifact.stage, Artifact.key)).all()
        validated = s.scalar(select(func.count()).select_from(Artifact).where(Artifact.validated.is_(True)))
    prefixes: dict[tuple[str, str], int] = {}
    for stage, key in keys:
        prefix = key.rsplit("/", 1)[0]
        prefixes[(stage, prefix)] = prefixes.get((stage, prefix), 0) + 1
    for (stage, prefix), n in prefixes.items():
        lines.append(f"  {stage:<8} {n:>4} objects under {store.location(prefix)}")
    lines.append(f"  {validated or 0} of {len(keys)} artifacts passed their quality gate")
    return "\n".join(lines)


if __name__ == "__main__":
    print(summarize(load_settings()))
