"""Idempotent writes: INSERT ... ON CONFLICT (natural key) DO UPDATE, on SQLite and Postgres."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import DeclarativeBase, Session


def _table(model: type[DeclarativeBase] | Table) -> Table:
    return model if isinstance(model, Table) else model.__table__  # type: ignore[return-value]


def upsert(
    session: Session,
    model: type[DeclarativeBase] | Table,
    rows: Iterable[Mapping[str, Any]],
    *,
    keys: Sequence[str],
    update: Sequence[str] | None = None,
    returning: Sequence[str] = (),
    batch_size: int = 500,
) -> list[tuple[Any, ...]]:
    """Insert ``rows``; on a conflict over ``keys`` update ``update`` columns (default: all others).

    ``update=()`` means "insert if absent, leave existing rows alone".  With ``returning`` the
    given columns of every written row come back (on conflict-do-nothing, only inserted rows).
    """
    table = _table(model)
    rows = [dict(r) for r in rows]
    if not rows:
        return []
    dialect = session.get_bind().dialect.name
    if dialect == "postgresql":
        insert = postgresql.insert
    elif dialect == "sqlite":
        insert = sqlite.insert
    else:  # pragma: no cover - other back ends are not supported
        raise NotImplementedError(f"upsert on {dialect}")
    out: list[tuple[Any, ...]] = []
    for start in range(0, len(rows), batch_size):
        batch = rows[start : start + batch_size]
        stmt = insert(table).values(batch)
        columns = update if update is not None else [c for c in batch[0] if c not in keys]
        if columns:
            stmt = stmt.on_conflict_do_update(
                index_elements=list(keys), set_={c: stmt.excluded[c] for c in columns}
            )
        else:
            stmt = stmt.on_conflict_do_nothing(index_elements=list(keys))
        if returning:
            stmt = stmt.returning(*[table.c[c] for c in returning])
            out.extend(tuple(r) for r in session.execute(stmt))
        else:
            session.execute(stmt)
    return out


def record_rejection(
    session: Session, stage: str, subject_type: str, subject_key: str, reason: str, detail: str | None = None
) -> None:
    """Record (idempotently) that ``subject_key`` was rejected at ``stage`` for ``reason``."""
    from scicodepile.db.models import Rejection
    from scicodepile.text import clean_opt, clean_text

    # Keys and details come from untrusted data (file names, API answers): make them storable here,
    # once, so no caller can fail a whole transaction with a NUL byte or a lone surrogate.
    subject_key, reason, detail = clean_text(subject_key), clean_text(reason), clean_opt(detail)
    upsert(
        session,
        Rejection,
        [
            {
                "stage": stage,
                "subject_type": subject_type,
                "subject_key": subject_key[:1024],
                "reason": reason[:128],
                "detail": (detail or "")[:4000] or None,
            }
        ],
        keys=["stage", "subject_type", "subject_key", "reason"],
        update=["detail"],
    )
