"""Create (or update) the pools the DAGs use; idempotent."""

from __future__ import annotations

import subprocess

from scicodepile_airflow.defaults import POOLS


def ensure_pools() -> None:
    for name, (slots, description) in POOLS.items():
        subprocess.run(
            ["airflow", "pools", "set", name, str(slots), description], check=True, capture_output=True
        )


if __name__ == "__main__":
    ensure_pools()
