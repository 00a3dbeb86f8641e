"""The object-store key layout, in one place (see DESIGN.md "Object store layout")."""

from __future__ import annotations

import re

_SAFE = re.compile(r"[^A-Za-z0-9._=+@-]+")


def safe_segment(text: str) -> str:
    """Turn any text into one key segment (no '/', no '..')."""
    cleaned = _SAFE.sub("_", text).strip("._") or "_"
    return cleaned[:200]


def snapshot_key(repository_id: int, commit: str, kind: str = "tar.gz") -> str:
    """A snapshot keeps its archive's own format (``tar.gz`` or ``zip``); folders are packed as tar.gz."""
    ext = "tar.gz" if kind == "dir" else safe_segment(kind)
    return f"snapshots/{repository_id}/{safe_segment(commit)}.{ext}"


def dataset_prefix(kind: str, config_slug: str) -> str:
    """``f1/<slug>``, ``f2/<slug>`` ...: one folder per dataset kind and config."""
    return f"{safe_segment(kind)}/{safe_segment(config_slug)}"


def shard_key(kind: str, config_slug: str, index: int) -> str:
    return f"{dataset_prefix(kind, config_slug)}/part-{index:05d}.parquet"


def manifest_key(shard: str) -> str:
    return shard.removesuffix(".parquet") + ".manifest.json"


def done_marker(stage: str, run: str, partition: str) -> str:
    return f"_state/{safe_segment(stage)}/{safe_segment(run)}/{safe_segment(partition)}.done"


def benchmark_prefix(version: str) -> str:
    return f"benchmark/{safe_segment(version)}"


def eval_prefix(benchmark_version: str, model: str) -> str:
    return f"eval/{safe_segment(benchmark_version)}/{safe_segment(model)}"


def llm_payload_key(cache_key: str) -> str:
    return f"llm-cache/{cache_key[:2]}/{cache_key}.json"
