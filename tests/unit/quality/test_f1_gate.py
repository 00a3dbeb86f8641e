"""The F1 great-expectations gate: passes on good shards, names the failed expectation otherwise."""

from __future__ import annotations

import pytest

from scicodepile.errors import QualityGateFailed
from scicodepile.quality import validate_f1
from scicodepile.store import open_store
from scicodepile.store.parquet import write_shard


def row(i: int, **over: object) -> dict:
    base = {
        "content": f"x = {i}\n",
        "repository": "a/b",
        "commit": "c0ffee",
        "path": f"m{i}.py",
        "language": "Python",
        "license": "MIT",
        "sha256": f"{i:064x}",
        "size": 6,
        "domain": "physics",
        "dedup_cluster": None,
    }
    return {**base, **over}


@pytest.fixture
def store(local_settings):
    return open_store(local_settings)


def gate(store, keys: list[str], ratio: float = 0.1) -> list:
    return validate_f1(
        store, keys, languages={"Python", "C"}, max_bytes=1000, duplicate_ratio=ratio, max_duplicate_ratio=0.5
    )


def test_good_shards_pass(store) -> None:
    write_shard(store, "f1/t/part-00000.parquet", [row(i) for i in range(5)])
    write_shard(store, "f1/t/part-00001.parquet", [row(i) for i in range(5, 9)])
    results = gate(store, ["f1/t/part-00000.parquet", "f1/t/part-00001.parquet"])
    assert all(r.success for r in results) and len(results) == 4


@pytest.mark.parametrize(
    ("rows", "ratio", "expected"),
    [
        ([row(0, content=None), row(1)], 0.1, "expect_column_values_to_not_be_null(column='content')"),
        ([row(0), row(1, sha256=f"{0:064x}")], 0.1, "expect_column_values_to_be_unique(column='sha256')"),
        ([row(0, language="Java")], 0.1, "expect_column_values_to_be_in_set(column='language'"),
        ([row(0, size=5000)], 0.1, "expect_column_values_to_be_between(column='size'"),
        ([row(0, size=0)], 0.1, "expect_column_values_to_be_between(column='size'"),
        ([], 0.1, "expect_column_values_to_be_between(column='rows'"),
        ([row(0)], 0.9, "expect_column_values_to_be_between(column='duplicate_ratio'"),
    ],
)
def test_failures_name_the_expectation(store, rows: list, ratio: float, expected: str) -> None:
    from scicodepile.curate.stage import _f1_schema

    write_shard(store, "f1/bad/part-00000.parquet", rows, _f1_schema())
    with pytest.raises(QualityGateFailed) as err:
        gate(store, ["f1/bad/part-00000.parquet"], ratio)
    assert expected in str(err.value) and err.value.stage == "f1"


def test_duplicate_sha_across_shards_fails(store) -> None:
    write_shard(store, "f1/x/part-00000.parquet", [row(1)])
    write_shard(store, "f1/x/part-00001.parquet", [row(1, path="copy.py")])
    with pytest.raises(QualityGateFailed, match="f1-corpus-sha256"):
        gate(store, ["f1/x/part-00000.parquet", "f1/x/part-00001.parquet"])


@pytest.mark.parametrize(
    ("union", "expected"),
    [
        ({"rows": 7, "duplicate_sha256": 1, "unaccounted_rows": 0}, "column='duplicate_sha256'"),
        ({"rows": 7, "duplicate_sha256": 0, "unaccounted_rows": 2}, "column='unaccounted_rows'"),
        ({"rows": 0, "duplicate_sha256": 0, "unaccounted_rows": 0}, "column='rows'"),
    ],
)
def test_union_figures_gate_an_incremental_f1(store, union: dict, expected: str) -> None:
    """A run with no new shard passes on a non-empty, consistent union; a bad union names its figure."""
    assert all(
        r.success for r in gate_union(store, {"rows": 7, "duplicate_sha256": 0, "unaccounted_rows": 0})
    )
    with pytest.raises(QualityGateFailed) as err:
        gate_union(store, union)
    assert "f1-union" in str(err.value) or "f1-corpus" in str(err.value)
    assert expected in str(err.value)


def gate_union(store, union: dict) -> list:
    return validate_f1(
        store,
        [],
        languages={"Python"},
        max_bytes=1000,
        duplicate_ratio=0.0,
        max_duplicate_ratio=0.5,
        union=union,
    )
