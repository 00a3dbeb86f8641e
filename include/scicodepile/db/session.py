"""Engine and session creation, with connection faults turned into one clear line."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, inspect, text
from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from scicodepile.errors import ConfigError
from scicodepile.settings import Settings, redact_url

SETTING = "SCICODEPILE_DATABASE_URL"


_ENGINES: dict[str, Engine] = {}


def _engine_for(url: str) -> Engine:
    """One engine (connection pool) per URL and process."""
    if url not in _ENGINES:
        _ENGINES[url] = _create_engine(url)
    return _ENGINES[url]


def dispose_engines() -> None:
    """Close every pooled connection (before dropping a database, after a fork)."""
    while _ENGINES:
        _ENGINES.popitem()[1].dispose()


def _create_engine(url: str) -> Engine:
    try:
        if url.startswith("sqlite"):
            path = url.split("///", 1)[-1]
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            engine = create_engine(url, connect_args={"timeout": 60})

            @event.listens_for(engine, "connect")
            def _sqlite_pragmas(dbapi_conn, _record) -> None:
                cur = dbapi_conn.cursor()
                cur.execute("PRAGMA foreign_keys=ON")
                cur.execute("PRAGMA journal_mode=WAL")
                cur.execute("PRAGMA busy_timeout=60000")
                cur.close()

            return engine
        return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=5)
    except (ArgumentError, NoSuchModuleError, ValueError) as exc:
        raise ConfigError(f"invalid database URL {redact_url(url)!r}: {exc}", setting=SETTING) from None


def get_engine(settings: Settings) -> Engine:
    return _engine_for(settings.resolved_database_url)


def check_connection(settings: Settings) -> None:
    """Connect once and run ``SELECT 1``; raise :class:`ConfigError` naming the setting on failure."""
    url = settings.resolved_database_url
    engine = get_engine(settings)
    try:
        with engine.connect() as conn:
            conn.execute(text("SELECT 1"))
    except OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig else str(exc).splitlines()[0]
        raise ConfigError(
            f"cannot connect to the application database at {redact_url(url)}: {reason}", setting=SETTING
        ) from None


def check_schema(settings: Settings) -> None:
    """Fail clearly when the database is reachable but not migrated."""
    check_connection(settings)
    if not inspect(get_engine(settings)).has_table("repositories"):
        raise ConfigError(
            "the application database has no schema yet: run `scicodepile db upgrade` "
            "(or `alembic upgrade head`)",
            setting=SETTING,
        )


@contextmanager
def session_scope(settings: Settings) -> Iterator[Session]:
    """A transaction: commit on success, roll back on error."""
    factory = sessionmaker(bind=get_engine(settings), expire_on_commit=False)
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()
