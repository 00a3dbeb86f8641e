"""The object store on both backends (local folder, real S3 server) and the database on Postgres."""

from __future__ import annotations

import threading
import uuid

import pyarrow.parquet as pq
import pytest
from sqlalchemy import select

from scicodepile.db import migrate, session_scope, upsert
from scicodepile.db.models import Repository
from scicodepile.store import ObjectNotFound, open_store
from scicodepile.store.base import InvalidKey
from scicodepile.store.keys import shard_key
from scicodepile.store.parquet import read_shard, write_shard

pytestmark = pytest.mark.integration


@pytest.fixture(params=["local", "s3"])
def store(request, local_settings, tmp_path):
    settings = request.getfixturevalue("s3_settings") if request.param == "s3" else local_settings
    return open_store(settings)


def test_put_get_list_delete_roundtrip(store) -> None:
    store.put_bytes("a/b/one.txt", b"one")
    store.put_bytes("a/b/two.txt", b"two!")
    store.put_bytes("a/c.txt", b"c")
    assert store.get_bytes("a/b/one.txt") == b"one"
    assert [(o.key, o.size) for o in store.list("a/b/")] == [("a/b/one.txt", 3), ("a/b/two.txt", 4)]
    assert store.stat("a/b/two.txt").size == 4
    store.delete("a/b/one.txt")
    assert not store.exists("a/b/one.txt")
    with pytest.raises(ObjectNotFound):
        store.get_bytes("a/b/one.txt")


def test_content_addressed_put_is_idempotent(store) -> None:
    k1 = store.put_content_addressed("blobs", b"same bytes")
    k2 = store.put_content_addressed("blobs", b"same bytes")
    assert k1 == k2 and k1.startswith("blobs/") and store.get_bytes(k1) == b"same bytes"
    assert len(list(store.list("blobs/"))) == 1


@pytest.mark.parametrize("key", ["../escape", "/abs", "a//b", "a/./b", "a/../../b", "", "a\nb"])
def test_hostile_keys_are_refused(store, key: str) -> None:
    with pytest.raises(InvalidKey):
        store.put_bytes(key, b"x")


def test_parquet_shard_roundtrip_is_readable_by_pyarrow_and_datasets(store, tmp_path) -> None:
    key = shard_key("f1", "test-slug", 0)
    rows = [{"content": f"x = {i}\n", "path": f"m{i}.py", "size": 6} for i in range(100)]
    manifest = write_shard(store, key, rows)
    assert manifest["rows"] == 100 and store.exists(key.replace(".parquet", ".manifest.json"))
    assert read_shard(store, key).to_pylist() == rows
    local = store.get_file(key, tmp_path / "dl" / "part.parquet")
    assert pq.read_table(local).num_rows == 100


def test_readers_never_see_a_partial_object(local_settings) -> None:
    """While a large object is rewritten, a reader always gets one of the complete versions."""
    store = open_store(local_settings)
    a, b = b"a" * 4_000_000, b"b" * 4_000_000
    store.put_bytes("big.bin", a)
    stop = threading.Event()
    bad: list[int] = []

    def reader() -> None:
        while not stop.is_set():
            data = store.get_bytes("big.bin")
            if data not in (a, b):
                bad.append(len(data))

    t = threading.Thread(target=reader)
    t.start()
    for i in range(20):
        store.put_bytes("big.bin", a if i % 2 else b)
    stop.set()
    t.join()
    assert bad == []


def test_postgres_migrations_and_idempotent_upsert(pg_settings) -> None:
    # The session's database is shared with other tests: use a key of this test's own.
    source_id = f"upsert-test-{uuid.uuid4().hex}"
    row = {"source": "github", "source_id": source_id, "full_name": "o/r", "stars": 10, "topics": ["chem"]}
    with session_scope(pg_settings) as s:
        upsert(s, Repository, [row], keys=["source", "source_id"])
        upsert(s, Repository, [{**row, "stars": 11}], keys=["source", "source_id"])
    with session_scope(pg_settings) as s:
        repos = s.scalars(select(Repository).where(Repository.source_id == source_id)).all()
    assert [(r.full_name, r.stars, r.topics) for r in repos] == [("o/r", 11, ["chem"])]


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_alembic_upgrade_downgrade_upgrade(backend: str, tmp_path, request) -> None:
    from sqlalchemy import inspect

    from scicodepile.db import get_engine
    from scicodepile.settings import load_settings

    url = request.getfixturevalue("pg_url") if backend == "postgres" else ""
    settings = load_settings(var_dir=tmp_path / "v", database_url=url)
    migrate(settings)
    assert inspect(get_engine(settings)).has_table("repositories")
    migrate(settings, "base", down=True)
    assert not inspect(get_engine(settings)).has_table("repositories")
    migrate(settings)
    tables = set(inspect(get_engine(settings)).get_table_names())
    assert {
        "queries",
        "search_partitions",
        "repositories",
        "snapshots",
        "files",
        "annotations",
        "llm_cache",
        "benchmark_tasks",
        "eval_runs",
        "eval_samples",
        "artifacts",
    } <= tables
