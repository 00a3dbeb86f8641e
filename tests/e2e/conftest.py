"""Session services for the end-to-end tests: a fresh Airflow metadata database and application
database on the machine's Postgres, a dedicated Redis db number as the Celery broker, the S3 test
server as the object store, and the running Airflow components."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.cluster import AirflowCluster, start_cluster
from tests.support.services import REDIS_URL, postgres_database

# A Redis db number of its own, flushed before and after: queued Celery messages of another run
# can never reach these workers.
E2E_REDIS_DB = int(os.environ.get("SCICODEPILE_TEST_E2E_REDIS_DB", "9"))


def _redis_url(db: int) -> str:
    base = REDIS_URL.rsplit("/", 1)[0] if REDIS_URL.count("/") >= 3 else REDIS_URL
    return f"{base}/{db}"


def _flush(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()


@pytest.fixture(scope="session")
def broker_url() -> Iterator[str]:
    url = _redis_url(E2E_REDIS_DB)
    _flush(url)
    yield url
    _flush(url)


@pytest.fixture(scope="session")
def airflow_metadata_url() -> Iterator[str]:
    with postgres_database(prefix="airflow_e2e") as url:
        yield url


@pytest.fixture(scope="session")
def app_db_url() -> Iterator[str]:
    with postgres_database(prefix="scicodepile_e2e") as url:
        yield url


@pytest.fixture(scope="session")
def fake_github(tmp_path_factory: pytest.TempPathFactory):
    """The local server speaking GitHub's search API: scheduled and backfill crawls search it."""
    from scicodepile.crawl.queries import expand_queries
    from scicodepile.settings import load_settings
    from tests.fakes.github_server import FakeGitHub, generate_population

    specs, _ = expand_queries(
        load_settings(var_dir=tmp_path_factory.mktemp("vocab"), crawl_max_queries=GITHUB_QUERIES)
    )
    population = generate_population([q.text for q in specs], n=4000, seed=7)
    with FakeGitHub(population, time_scale=60) as gh:
        yield gh


GITHUB_QUERIES = 2


@pytest.fixture(scope="session")
def app_env(
    app_db_url: str, s3_server, fake_github, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, str]:
    """The library's settings as the workers see them (Postgres app database, S3 store, fake GitHub)."""
    var = tmp_path_factory.mktemp("scicodepile-var")
    return {
        # scheduled runs (unpausing the crawl starts one) and backfills search the fake GitHub
        "SCICODEPILE_DEFAULT_SOURCE": "github",
        "SCICODEPILE_GITHUB_API_URL": fake_github.url,
        "SCICODEPILE_GITHUB_TOKEN": "test-token",
        "SCICODEPILE_GITHUB_RATE_MARGIN_S": "0.01",
        "SCICODEPILE_GITHUB_BACKOFF_S": "0.01",
        "SCICODEPILE_GITHUB_SECONDARY_WAIT_S": "0.1",
        "SCICODEPILE_GITHUB_MIN_STARS": "2",
        "SCICODEPILE_CRAWL_MAX_QUERIES": str(GITHUB_QUERIES),
        "SCICODEPILE_DATABASE_URL": app_db_url,
        "SCICODEPILE_STORE_BACKEND": "s3",
        "SCICODEPILE_S3_ENDPOINT": s3_server.endpoint,
        "SCICODEPILE_S3_BUCKET": "e2e-" + os.urandom(4).hex(),
        "SCICODEPILE_S3_CREATE_BUCKET": "true",
        "SCICODEPILE_VAR_DIR": str(var),
        "SCICODEPILE_NUM_SHARDS": "2",
    }


@pytest.fixture(scope="session")
def app_settings(app_env: dict[str, str]):
    from scicodepile.settings import load_settings

    return load_settings(
        database_url=app_env["SCICODEPILE_DATABASE_URL"],
        store_backend="s3",
        s3_endpoint=app_env["SCICODEPILE_S3_ENDPOINT"],
        s3_bucket=app_env["SCICODEPILE_S3_BUCKET"],
        s3_create_bucket=True,
        var_dir=Path(app_env["SCICODEPILE_VAR_DIR"]),
    )


@pytest.fixture(scope="session")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, airflow_metadata_url: str, broker_url: str, app_env: dict
) -> Iterator[AirflowCluster]:
    home = tmp_path_factory.mktemp("airflow-e2e")
    c = start_cluster(home, metadata_url=airflow_metadata_url, broker_url=broker_url, app_env=app_env)
    print(f"\nAirflow components and logs under {home}")
    try:
        yield c
    finally:
        c.close()
