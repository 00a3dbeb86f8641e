"""Alembic environment: migrations for SQLite (embedded) and Postgres (production) alike."""

from __future__ import annotations

from logging.config import fileConfig

from alembic import context

from scicodepile.db.models import Base
from scicodepile.db.session import check_connection, get_engine
from scicodepile.settings import load_settings

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    fileConfig(config.config_file_name, disable_existing_loggers=False)

target_metadata = Base.metadata


def _settings():
    url = context.get_x_argument(as_dictionary=True).get("url") or config.attributes.get("url")
    return load_settings(database_url=url) if url else load_settings()


def run_migrations_offline() -> None:
    context.configure(
        url=_settings().resolved_database_url,
        target_metadata=target_metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_migrations_online() -> None:
    settings = _settings()
    check_connection(settings)
    with get_engine(settings).connect() as connection:
        context.configure(connection=connection, target_metadata=target_metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
        connection.commit()


if context.is_offline_mode():
    run_migrations_offline()
else:
    run_migrations_online()
