"""The F1 gate: no null content, unique sha256, languages in the allowed set, sizes in bounds,
non-empty output, duplicate ratio within bounds; for an F1 made of several runs, no sha256 twice in the
union and every live row accounted for by the database.

Per-shard checks run shard by shard (bounded memory); uniqueness of sha256 runs over the sha256
column of all shards together; the table-level checks (row count, duplicate ratio) over one row of
corpus statistics.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from scicodepile.quality.gates import GateResult, enforce, run_suite
from scicodepile.store.base import ObjectStore


def f1_expectations(languages: Iterable[str], max_bytes: int) -> list[Any]:
    """Per-shard expectations of an F1 shard."""
    import great_expectations as gx

    e = gx.expectations
    return [
        e.ExpectColumnValuesToNotBeNull(column="content"),
        e.ExpectColumnValuesToNotBeNull(column="repository"),
        e.ExpectColumnValuesToNotBeNull(column="path"),
        e.ExpectColumnValuesToNotBeNull(column="license"),
        e.ExpectColumnValuesToBeUnique(column="sha256"),
        e.ExpectColumnValuesToBeInSet(column="language", value_set=sorted(languages)),
        e.ExpectColumnValuesToBeBetween(column="size", min_value=1, max_value=max_bytes),
    ]


def validate_f1(
    store: ObjectStore,
    shard_keys: list[str],
    *,
    languages: Iterable[str],
    max_bytes: int,
    duplicate_ratio: float,
    max_duplicate_ratio: float,
    union: Mapping[str, int] | None = None,
) -> list[GateResult]:
    """Run the F1 suites over the published shards; raise QualityGateFailed on any failure.

    ``shard_keys`` are the shards to check row by row (a run's new shards).  ``union`` carries figures
    of the whole F1 when it is the union of several runs (``rows``: live rows, ``duplicate_sha256``,
    ``unaccounted_rows``: live rows the database does not account for); the non-empty check then
    applies to the whole F1, and the union must hold no sha256 twice and no unaccounted row.
    """
    import great_expectations as gx
    import pandas as pd

    from scicodepile.store.parquet import read_shard

    languages = sorted(languages)
    results: list[GateResult] = []
    hashes: list[pd.Series] = []
    rows = 0
    for key in shard_keys:
        frame = read_shard(store, key).to_pandas()
        rows += len(frame)
        hashes.append(frame["sha256"])
        if len(frame):
            results.append(
                run_suite(f"f1-shard-{key.rsplit('/', 1)[-1]}", frame, f1_expectations(languages, max_bytes))
            )
    e = gx.expectations
    all_hashes = pd.DataFrame({"sha256": pd.concat(hashes, ignore_index=True) if hashes else []})
    results.append(
        run_suite("f1-corpus-sha256", all_hashes, [e.ExpectColumnValuesToBeUnique(column="sha256")])
    )
    if union is not None:
        rows = int(union["rows"])
        figures = pd.DataFrame(
            {
                "duplicate_sha256": [int(union["duplicate_sha256"])],
                "unaccounted_rows": [int(union["unaccounted_rows"])],
            }
        )
        results.append(
            run_suite(
                "f1-union",
                figures,
                [
                    e.ExpectColumnValuesToBeBetween(column="duplicate_sha256", min_value=0, max_value=0),
                    e.ExpectColumnValuesToBeBetween(column="unaccounted_rows", min_value=0, max_value=0),
                ],
            )
        )
    stats = pd.DataFrame({"rows": [rows], "duplicate_ratio": [float(duplicate_ratio)]})
    results.append(
        run_suite(
            "f1-corpus",
            stats,
            [
                e.ExpectColumnValuesToBeBetween(column="rows", min_value=1),
                e.ExpectColumnValuesToBeBetween(
                    column="duplicate_ratio", min_value=0.0, max_value=max_duplicate_ratio
                ),
            ],
        )
    )
    enforce("f1", results)
    return results
