"""Shared fixtures: real Postgres databases, a real S3 server, settings for each backend.

Fixtures never skip for a missing service: a test that needs Postgres or S3 fails loudly.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.services import postgres_database, seaweedfs_s3

# Tests never read the developer's .env or SCICODEPILE_* variables by accident.
for _name in list(os.environ):
    if _name.startswith("SCICODEPILE_") and not _name.startswith("SCICODEPILE_TEST_"):
        del os.environ[_name]


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh Postgres database for this test session (dropped at the end)."""
    with postgres_database() as url:
        yield url


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory):
    """A SeaweedFS S3 server for this test session."""
    with seaweedfs_s3(tmp_path_factory.mktemp("seaweedfs")) as server:
        yield server


@pytest.fixture
def local_settings(tmp_path: Path):
    """Embedded defaults in a temporary folder: SQLite file and local object store."""
    from scicodepile.settings import load_settings

    return load_settings(var_dir=tmp_path / "var")


@pytest.fixture
def pg_settings(tmp_path: Path, pg_url: str):
    """Postgres application database (migrated), local object store."""
    from scicodepile.db import migrate
    from scicodepile.settings import load_settings

    settings = load_settings(var_dir=tmp_path / "var", database_url=pg_url)
    migrate(settings)
    return settings


@pytest.fixture
def own_pg_settings(tmp_path: Path):
    """Like ``pg_settings`` but on a fresh Postgres database of this test's own (migrated).

    A database and an object store belong together: a test that runs a whole stage with its own local
    store must not share the session database, or the other tests' rows would look unaccounted for.
    """
    from scicodepile.db import migrate
    from scicodepile.settings import load_settings

    with postgres_database("scicodepile_own") as url:
        settings = load_settings(var_dir=tmp_path / "var", database_url=url)
        migrate(settings)
        yield settings


@pytest.fixture
def s3_settings(tmp_path: Path, s3_server, request: pytest.FixtureRequest):
    """S3 object store on the test server, a bucket of this test's own."""
    import re

    from scicodepile.settings import load_settings

    bucket = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-" + os.urandom(3).hex()
    return load_settings(
        var_dir=tmp_path / "var",
        store_backend="s3",
        s3_endpoint=s3_server.endpoint,
        s3_bucket=bucket,
        s3_create_bucket=True,
    )
