"""Where the curate stage's outputs live, and how to read F1 back (see :mod:`scicodepile.curate.stage`).

F1 is append-only, one partition per run::

    f1/<slug>/run=<run>/part-NNNNN.parquet            rows newly kept by the run (never empty)
    f1/<slug>/run=<run>/part-NNNNN.manifest.json      its manifest
    f1/<slug>/run=<run>/part-NNNNN.superseded.json    tombstones: rows of EARLIER shards retracted

The live dataset is the union of every shard minus the tombstoned rows (:func:`read_f1`).  Work files
of a run (staging contents, MinHash signatures, tombstone drafts) lie under
``curate-work/<slug>/<run>/``.  ``<slug>`` names the config (:func:`f1_slug`), so changed filters
never overwrite earlier outputs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from typing import Any

from scicodepile.store.keys import dataset_prefix, safe_segment

CURATE_SETTINGS = (
    "curate_min_stars",
    "curate_languages",
    "curate_min_code_share",
    "curate_license_policy",
    "curate_max_file_bytes",
    "curate_max_line_length",
    "curate_max_mean_line_length",
    "curate_min_alnum_fraction",
    "curate_redact",
)


def _f1_schema() -> Any:
    import pyarrow as pa

    return pa.schema(
        [
            ("content", pa.string()),
            ("repository", pa.string()),
            ("commit", pa.string()),
            ("path", pa.string()),
            ("language", pa.string()),
            ("license", pa.string()),
            ("sha256", pa.string()),
            ("size", pa.int64()),
            ("domain", pa.string()),
            ("dedup_cluster", pa.string()),
        ]
    )


def _staging_schema() -> Any:
    import pyarrow as pa

    return pa.schema([("file_id", pa.int64()), *[(f.name, f.type) for f in _f1_schema()]])


# ------------------------------------------------------------------------------------- configs
def minhash_config(settings: Any) -> Any:
    """The near-dup config named by the ``dedup_*`` settings."""
    from scicodepile.curate.dedup import MinhashConfig

    return MinhashConfig.from_settings(settings)


def f1_slug(settings: Any) -> str:
    """Output name of F1 for these settings: ``<minhash slug>-<hash of the curate settings and the
    README heuristic's version>``, so changed filters never overwrite earlier outputs."""
    import hashlib

    from scicodepile.curate.filters.readme import load_heuristic

    basis = f"{settings.slug(*CURATE_SETTINGS)}:heuristic-v{load_heuristic().version}"
    return f"{minhash_config(settings).slug}-{hashlib.sha256(basis.encode()).hexdigest()[:10]}"


def _run_prefix(ctx: Any, what: str) -> str:
    return f"curate-work/{safe_segment(f1_slug(ctx.settings))}/{safe_segment(ctx.run)}/{what}"


def _staging_key(ctx: Any, index: int) -> str:
    return f"{_run_prefix(ctx, 'staging')}/part-{index:05d}.parquet"


def _signature_key(ctx: Any, index: int) -> str:
    return f"{_run_prefix(ctx, 'signatures')}/part-{index:05d}.parquet"


def _tombstone_staging_key(ctx: Any, index: int) -> str:
    return f"{_run_prefix(ctx, 'superseded')}/part-{index:05d}.json"


def f1_prefix(settings: Any) -> str:
    """``f1/<slug>/``: every run's F1 partition of this config lies under it."""
    return dataset_prefix("f1", f1_slug(settings)) + "/"


def f1_run_prefix(ctx: Any) -> str:
    """``f1/<slug>/run=<run>/``: this run's F1 partition."""
    return f"{f1_prefix(ctx.settings)}run={safe_segment(ctx.run)}/"


def f1_key(ctx: Any, index: int) -> str:
    """The F1 shard of one repository shard in this run."""
    return f"{f1_run_prefix(ctx)}part-{index:05d}.parquet"


def tombstone_key(shard: str) -> str:
    """The tombstone list beside an F1 shard: rows of earlier shards that this shard's run retracted."""
    return shard.removesuffix(".parquet") + ".superseded.json"


def f1_shard_keys(store: Any, settings: Any) -> list[str]:
    """Every published F1 shard of this config (all runs), sorted."""
    return sorted(o.key for o in store.list(f1_prefix(settings)) if o.key.endswith(".parquet"))


def f1_tombstones(store: Any, settings: Any) -> list[dict[str, Any]]:
    """Every tombstone entry of this config: ``{"shard_key", "repository", "commit", "path", ...}``."""
    out: list[dict[str, Any]] = []
    for o in sorted(store.list(f1_prefix(settings)), key=lambda o: o.key):
        if o.key.endswith(".superseded.json"):
            out.extend(json.loads(store.get_bytes(o.key)).get("entries", []))
    return out


def read_f1(store: Any, settings: Any, columns: list[str] | None = None) -> Any:
    """The live F1 dataset of this config as one Arrow table: the union of all runs' shards minus the
    tombstoned rows (a reader's reference implementation; it holds the table in memory)."""
    import pyarrow as pa

    from scicodepile.store.parquet import read_shard

    dead = _tombstone_index(f1_tombstones(store, settings))
    tables = []
    for key in f1_shard_keys(store, settings):
        table = read_shard(store, key)
        if key in dead:
            keep = [
                _row_id(r) not in dead[key]
                for r in _iter_rows(table.select(["repository", "commit", "path"]))
            ]
            table = table.filter(pa.array(keep, type=pa.bool_()))
        tables.append(table.select(columns) if columns else table)
    if not tables:
        schema = _f1_schema()
        return schema.empty_table().select(columns) if columns else schema.empty_table()
    return pa.concat_tables(tables)


def _row_id(row: dict[str, Any]) -> tuple[str, str, str]:
    return (row["repository"], row["commit"], row["path"])


def _tombstone_index(entries: Iterable[dict[str, Any]]) -> dict[str, set[tuple[str, str, str]]]:
    dead: dict[str, set[tuple[str, str, str]]] = {}
    for e in entries:
        dead.setdefault(e["shard_key"], set()).add(_row_id(e))
    return dead


def _iter_rows(table: Any) -> Iterator[dict[str, Any]]:
    for batch in table.to_batches(max_chunksize=1000):
        yield from batch.to_pylist()
