"""Which copy of a duplicate cluster survives."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any


def select_keepers(clusters: Mapping[str, str], rank: Callable[[str], tuple[Any, ...]]) -> set[str]:
    """Return the doc_ids to DROP: every cluster keeps exactly its document with the smallest rank.

    ``rank(doc_id)`` is the caller's rule as a sort key (curate: permissive license first, then more
    stars, then more forks, then more recent).  Ties are broken by the smaller doc_id, so the choice
    never depends on dict order.
    """
    best: dict[str, tuple[tuple[Any, ...], str]] = {}
    for doc_id, cluster in clusters.items():
        key = (tuple(rank(doc_id)), doc_id)
        current = best.get(cluster)
        if current is None or key < current:
            best[cluster] = key
    keep = {doc_id for _, doc_id in best.values()}
    return {doc_id for doc_id in clusters if doc_id not in keep}
