"""Airflow task context -> the library's :class:`scicodepile.runner.RunContext`, at run time.

The DAG files stay wiring: every task calls :func:`stage_context` and hands the result to a library
stage function.  Precedence for each knob: the run's params (the trigger form in the UI, or the
``conf`` of a REST/backfill trigger) > the ``extra`` of the asset event that triggered the run (so a
curate run follows the crawl that produced its candidates) > the library settings.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

# Run types whose data interval is the crawl window; manual runs crawl everything unless the
# window_start / window_end params say otherwise.
WINDOWED_RUN_TYPES = {"scheduled", "backfill"}
INHERITED = ("source", "path", "limit", "shards")


def run_key(run_id: str) -> str:
    """A run key for completion markers and output keys from an Airflow run id.

    Retries of a task in the same DAG run see the same key (so completed partitions are skipped);
    a new DAG run gets a new key (so new candidates are processed).
    """
    return re.sub(r"[^A-Za-z0-9._=+@-]+", "_", run_id).strip("._")[:120] or "run"


def _inherited(context: dict[str, Any]) -> dict[str, Any]:
    """The ``extra`` of the asset events that triggered this run (latest event wins)."""
    merged: dict[str, Any] = {}
    events = context.get("triggering_asset_events") or {}
    try:
        groups = [events[asset] for asset in events]
    except Exception:  # an accessor that cannot resolve: behave as a manual run
        log.warning("could not read the triggering asset events; using params and settings only")
        return merged
    for group in groups:
        for event in sorted(group, key=lambda e: str(getattr(e, "timestamp", ""))):
            extra = dict(getattr(event, "extra", None) or {})
            merged.update({k: v for k, v in extra.items() if k in INHERITED and v not in (None, "")})
    return merged


def window(context: dict[str, Any]) -> tuple[str | None, str | None]:
    """The crawl window: explicit params, else the data interval of scheduled and backfill runs."""
    params = context.get("params") or {}
    start, end = params.get("window_start") or None, params.get("window_end") or None
    if start or end:
        return start, end
    dag_run = context.get("dag_run")
    run_type = str(getattr(dag_run, "run_type", "") or "").lower().split(".")[-1]
    if run_type in WINDOWED_RUN_TYPES:
        lo, hi = context.get("data_interval_start"), context.get("data_interval_end")
        if lo is not None and hi is not None and hi > lo:  # a trigger timetable gives lo == hi
            return lo.isoformat(), hi.isoformat()
    return None, None


def stage_context(stage: str, context: dict[str, Any] | None = None, **settings_overrides: Any):
    """Build the library's RunContext for ``stage`` from the current task's Airflow context."""
    from airflow.sdk import get_current_context

    from scicodepile.runner import SOURCES, RunContext
    from scicodepile_airflow.hooks import library_settings

    context = dict(context or get_current_context())
    params = dict(context.get("params") or {})
    inherited = _inherited(context)

    def pick(name: str) -> Any:
        value = params.get(name)
        return value if value not in (None, "") else inherited.get(name)

    settings = library_settings(**settings_overrides)
    source = pick("source") or settings.default_source
    if source not in SOURCES:
        from scicodepile.errors import ConfigError

        raise ConfigError(f"unknown source {source!r}; choose one of {', '.join(SOURCES)}", setting="source")
    path = pick("path")
    limit = pick("limit")
    shards = pick("shards") or settings.num_shards
    extra: dict[str, Any] = {
        k: v for k, v in params.items() if k not in (*INHERITED, "run") and v not in (None, "")
    }
    if stage == "crawl":
        start, end = window(context)
        extra.update({k: v for k, v in (("window_start", start), ("window_end", end)) if v})
    run_id = str(context.get("run_id") or getattr(context.get("dag_run"), "run_id", "") or "manual")
    return RunContext(
        settings=settings,
        source=str(source),
        path=Path(str(path)).expanduser().resolve() if path else None,
        limit=int(limit) if limit is not None else None,
        run=str(params.get("run") or run_key(run_id)),
        num_shards=int(shards),
        params=extra,
    )


def asset_extra(ctx: Any, report: dict[str, Any]) -> dict[str, Any]:
    """The small ``extra`` a stage attaches to its asset event: how it ran and what it counted."""
    return {
        "source": ctx.source,
        "path": str(ctx.path) if ctx.path else None,
        "limit": ctx.limit,
        "shards": ctx.num_shards,
        "run": ctx.run,
        "kept": report.get("kept"),
        "rejected": sum((report.get("rejected") or {}).values()),
        **{k: v for k, v in ctx.params.items() if k.startswith("window_")},
    }
