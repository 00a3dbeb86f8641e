"""Candidate upserts keyed by (source, repository id), safe under concurrent crawl tasks.

A repository found by several queries stays one row whose ``queries`` list is the union of them all:
the union is computed by the database inside ``ON CONFLICT DO UPDATE``, so two tasks writing the same
repository at once cannot lose each other's query.  A changed ``pushed_at`` marks the repository for
re-curation; an unchanged one keeps its flag (it is not fetched again).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

from sqlalchemy import literal_column
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from scicodepile.crawl.windows import parse_instant
from scicodepile.db.models import Repository
from scicodepile.records import RepositoryRecord

_MERGE_QUERIES = {
    "postgresql": (
        "(SELECT COALESCE(json_agg(DISTINCT v ORDER BY v), '[]'::json) FROM ("
        "SELECT json_array_elements_text(repositories.queries) AS v "
        "UNION SELECT json_array_elements_text(excluded.queries)) AS q)"
    ),
    "sqlite": (
        "(SELECT json_group_array(v) FROM (SELECT value AS v FROM json_each(repositories.queries) "
        "UNION SELECT value FROM json_each(excluded.queries) ORDER BY 1))"
    ),
}
_RECURATE = {
    "postgresql": (
        "CASE WHEN repositories.pushed_at IS DISTINCT FROM excluded.pushed_at THEN true "
        "ELSE repositories.needs_recurate END"
    ),
    "sqlite": (
        "CASE WHEN repositories.pushed_at IS NOT excluded.pushed_at THEN 1 "
        "ELSE repositories.needs_recurate END"
    ),
}
_UPDATED = (
    "full_name",
    "url",
    "description",
    "stars",
    "forks",
    "license",
    "topics",
    "language",
    "is_fork",
    "archived",
    "size_kb",
    "default_branch",
    "created_at_remote",
    "pushed_at",
    "extra",
)


def _row(record: RepositoryRecord, query: str | None) -> dict[str, Any]:
    return {
        "source": record.source,
        "source_id": record.source_id,
        "full_name": record.full_name[:512],
        "url": record.url,
        "description": record.description,
        "stars": record.stars,
        "forks": record.forks,
        "license": (record.license or None) and record.license[:128],
        "topics": list(record.topics),
        "language": record.language,
        "is_fork": record.is_fork,
        "archived": record.archived,
        "size_kb": record.size_kb,
        "default_branch": record.default_branch,
        "created_at_remote": parse_instant(record.created_at) if record.created_at else None,
        "pushed_at": parse_instant(record.pushed_at) if record.pushed_at else None,
        "domain": record.domain,
        "queries": [query] if query else [],
        "extra": dict(record.extra),
        "status": "candidate",
        "stage_status": {"crawl": "done"},
        "needs_recurate": True,
    }


@functools.cache
def _statement(dialect: str) -> Any:
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    stmt = insert(Repository.__table__)
    set_: dict[str, Any] = {c: stmt.excluded[c] for c in _UPDATED}
    set_["queries"] = literal_column(_MERGE_QUERIES[dialect])
    set_["needs_recurate"] = literal_column(_RECURATE[dialect])
    set_["domain"] = literal_column("COALESCE(repositories.domain, excluded.domain)")
    return stmt.on_conflict_do_update(index_elements=["source", "source_id"], set_=set_)


def upsert_repositories(
    session: Session, records: Iterable[RepositoryRecord], query: str | None = None
) -> int:
    """Insert or update candidates; returns how many rows were written."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    for record in records:
        rows[(record.source, record.source_id)] = _row(record, query)
    if not rows:
        return 0
    dialect = session.get_bind().dialect.name
    # executemany with one statement object: compiled once and cached (a multi-VALUES literal of 100
    # rows would be compiled again for every page, which cost more than the request itself)
    session.execute(_statement(dialect), list(rows.values()))
    return len(rows)
