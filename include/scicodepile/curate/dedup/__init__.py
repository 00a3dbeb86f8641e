"""Exact and near-duplicate removal for F1.

Exact: :func:`content_sha256` of :func:`normalise_for_hash`.  Near: MinHash LSH in explicit passes
sharing one :class:`MinhashConfig` (The Stack v2 defaults: 5-gram token shingles, 250 permutations in
25 bands of 10, Jaccard 0.7):

1. :func:`write_signature_shard` per partition of files (parallel, streaming);
2. :func:`find_duplicate_clusters` once over all signature shards (bounded memory, on-disk partitions;
   band collisions are verified against the full signatures unless ``MinhashConfig(verify=False)``);
3. :func:`select_keepers` with the caller's ranking rule -> the doc_ids to drop.
"""

from __future__ import annotations

from scicodepile.curate.dedup.config import MinhashConfig
from scicodepile.curate.dedup.exact import content_sha256, normalise_for_hash
from scicodepile.curate.dedup.index import DEFAULT_MEMORY_BUDGET, find_duplicate_clusters
from scicodepile.curate.dedup.keepers import select_keepers
from scicodepile.curate.dedup.minhash import write_signature_shard

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MinhashConfig",
    "content_sha256",
    "find_duplicate_clusters",
    "normalise_for_hash",
    "select_keepers",
    "write_signature_shard",
]
