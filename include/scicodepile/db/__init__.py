"""The application database: models, sessions, idempotent upserts, migrations."""

from __future__ import annotations

from pathlib import Path

from scicodepile.db.session import check_connection, check_schema, get_engine, session_scope
from scicodepile.db.upsert import record_rejection, upsert
from scicodepile.settings import REPO_ROOT, Settings

__all__ = [
    "check_connection",
    "check_schema",
    "get_engine",
    "migrate",
    "record_rejection",
    "session_scope",
    "upsert",
]


def alembic_config(settings: Settings):
    from alembic.config import Config

    cfg = Config(str(REPO_ROOT / "alembic.ini"))
    cfg.attributes["url"] = settings.resolved_database_url
    cfg.attributes["configure_logger"] = False
    return cfg


def migrate(settings: Settings, revision: str = "head", *, down: bool = False) -> None:
    """Upgrade (or downgrade) the application database; a bad URL raises ConfigError."""
    from alembic import command

    check_connection(settings)
    cfg = alembic_config(settings)
    if down:
        command.downgrade(cfg, revision)
    else:
        command.upgrade(cfg, revision)


MIGRATIONS_DIR = Path(__file__).parent / "migrations"
