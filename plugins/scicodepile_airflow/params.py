"""DAG params: the trigger form for manual runs from the UI (and the ``conf`` of REST triggers).

Empty values mean "inherit": from the asset event that triggered the run, else the library settings
(see :mod:`scicodepile_airflow.context`).  Validated by Airflow against their JSON schema.
"""

from __future__ import annotations

from typing import Any

from airflow.sdk import Param


def _common() -> dict[str, Param]:
    return {
        "source": Param(
            None,
            type=["null", "string"],
            enum=[None, "sample", "local", "github"],
            title="Source",
            description="sample: PyPI sdists of the embedded manifest; local: a folder of repositories; "
            "github: the search API (needs the github_default connection). Empty: inherit / sample.",
        ),
        "path": Param(
            None,
            type=["null", "string"],
            title="Path",
            description="Folder of repositories for the local source (as seen by the workers).",
        ),
        "limit": Param(
            None, type=["null", "integer"], minimum=1, title="Limit", description="At most this many."
        ),
        "shards": Param(
            None,
            type=["null", "integer"],
            minimum=1,
            maximum=256,
            title="Shards",
            description="Partitions to map over (coarse: a shard of repositories). Empty: settings.",
        ),
        "run": Param(
            None,
            type=["null", "string"],
            title="Run key",
            description="Completion markers and outputs are keyed by it. Empty: derived from the run id.",
        ),
    }


def crawl_params() -> dict[str, Any]:
    """Params of the crawl DAG: sources and limits, the window, retrying only failed partitions."""
    return {
        **_common(),
        "only_failed": Param(
            False, type="boolean", title="Only failed", description="Retry only failed search partitions."
        ),
        "window_start": Param(
            None,
            type=["null", "string"],
            title="Window start",
            description="ISO datetime; empty: the data interval for scheduled/backfill runs, none otherwise.",
        ),
        "window_end": Param(None, type=["null", "string"], title="Window end", description="ISO datetime."),
    }


def curate_params() -> dict[str, Any]:
    """Params of the curate DAG (empty values follow the crawl that triggered the run)."""
    return {
        **_common(),
        "recurate_all": Param(
            False,
            type="boolean",
            title="Re-curate all",
            description="Curate every repository of the source again, not only new or updated ones "
            "(files already published in F1 are not published twice).",
        ),
    }
