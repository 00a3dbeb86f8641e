"""Shared DAG defaults: owner, retries with exponential backoff, tags, pool names."""

from __future__ import annotations

from datetime import timedelta

import pendulum

OWNER = "scicodepile"
START_DATE = pendulum.datetime(2026, 1, 1, tz="UTC")

DEFAULT_ARGS = {
    "owner": OWNER,
    "retries": 3,
    "retry_delay": timedelta(seconds=10),
    "retry_exponential_backoff": True,
    "max_retry_delay": timedelta(minutes=10),
    "execution_timeout": timedelta(hours=2),
}

TAGS = ["scicodepile"]

# Pools bound concurrency across all Celery workers (created by `make demo` and the compose init).
GITHUB_SEARCH_POOL = "github_search"
LLM_POOL = "llm"
SANDBOX_POOL = "sandbox"
POOLS = {
    GITHUB_SEARCH_POOL: (1, "GitHub search: 30 requests/min per token, one crawler at a time"),
    LLM_POOL: (8, "concurrent LLM requests across workers"),
    SANDBOX_POOL: (2, "sandboxed executions (one per core)"),
}
