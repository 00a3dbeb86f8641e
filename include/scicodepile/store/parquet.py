"""Parquet shards with a manifest each, readable by ``pyarrow`` and ``datasets``."""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from scicodepile.store.base import ObjectStore, sha256_file
from scicodepile.store.keys import manifest_key


def write_shard(
    store: ObjectStore,
    key: str,
    rows: Iterable[Mapping[str, Any]],
    schema: Any = None,  # pyarrow.Schema
    *,
    extra_manifest: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Write ``rows`` as one Parquet object, then its manifest; return the manifest.

    The manifest is written last, so its presence means the shard is complete.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = list(rows)
    table = pa.Table.from_pylist(rows, schema=schema)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "shard.parquet"
        pq.write_table(table, path, compression="zstd")
        size = store.put_file(key, path, "application/vnd.apache.parquet")
        manifest = {
            "key": key,
            "rows": table.num_rows,
            "bytes": size,
            "sha256": sha256_file(path),
            "columns": table.schema.names,
            **dict(extra_manifest or {}),
        }
    store.put_bytes(
        manifest_key(key), json.dumps(manifest, indent=2, default=str).encode(), "application/json"
    )
    return manifest


def read_shard(store: ObjectStore, key: str):
    import pyarrow.parquet as pq

    with tempfile.TemporaryDirectory() as tmp:
        path = store.get_file(key, Path(tmp) / "shard.parquet")
        return pq.read_table(path)
