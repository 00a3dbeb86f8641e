"""A smoke run of the platform's wiring: migrate the database, round-trip the object store.

It is the first job of ``make demo`` and proves the stores work before any stage runs.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime

from scicodepile.db import check_schema, migrate, session_scope, upsert
from scicodepile.db.models import Artifact
from scicodepile.pipeline import StageReport
from scicodepile.settings import Settings
from scicodepile.store import open_store
from scicodepile.store.keys import shard_key
from scicodepile.store.parquet import read_shard, write_shard


def migrate_database(settings: Settings) -> str:
    migrate(settings)
    check_schema(settings)
    return settings.public_dict()["database_url"]  # type: ignore[return-value]


def probe_store(settings: Settings, run: str = "smoke") -> StageReport:
    """Write a small Parquet shard and its manifest, read it back, and register the artifact."""
    start = time.monotonic()
    store = open_store(settings)
    key = shard_key("smoke", run, 0)
    rows = [{"n": i, "square": i * i, "at": datetime.now(UTC).isoformat()} for i in range(10)]
    manifest = write_shard(store, key, rows, extra_manifest={"stage": "smoke"})
    table = read_shard(store, key)
    if table.num_rows != len(rows):
        raise RuntimeError(f"smoke shard read back {table.num_rows} rows, wrote {len(rows)}")
    with session_scope(settings) as session:
        upsert(
            session,
            Artifact,
            [
                {
                    "key": key,
                    "stage": "smoke",
                    "config_slug": run,
                    "partition": "0",
                    "sha256": manifest["sha256"],
                    "bytes": manifest["bytes"],
                    "rows": manifest["rows"],
                    "validated": True,
                    "validation": {"rows_read_back": table.num_rows},
                }
            ],
            keys=["key"],
        )
    report = StageReport("smoke", kept=table.num_rows, outputs=[key], seconds=time.monotonic() - start)
    report.details["location"] = store.location(key)
    return report


if __name__ == "__main__":  # pragma: no cover
    from scicodepile.settings import load_settings

    s = load_settings()
    print(migrate_database(s))
    print(json.dumps(probe_store(s).to_dict()))
