"""The LSH index: band collisions -> union-find -> clusters, in bounded memory.

Memory bound (documented because the corpus is 3.26 million files and must never sit in RAM):

* the texts are never here, only signature shards (``doc_id`` + one uint64 per band);
* the union-find is one ``int64`` array over all documents: 8 bytes x N (26 MB at 3.26 M);
* bands are processed one at a time, and each band's hashes are split by ``hash mod P`` into ``P``
  partitions spilled to files under ``workdir``; a partition is sorted alone, so the working set is
  about ``_BYTES_PER_ENTRY x N / P`` bytes.  ``P`` is the smallest number that fits
  ``memory_budget_bytes`` (``P = 1``: the band's column is sorted in memory, no spill);
* reading one band of one shard holds that shard's column (8 bytes x shard rows);
* the result maps only documents that have a duplicate, with their cluster ids.

So peak memory is about ``8 N + max(budget, 8 x largest shard) + output``, whatever N is.
"""

from __future__ import annotations

import json
import math
import shutil
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from scicodepile.curate.dedup.config import MinhashConfig
from scicodepile.curate.dedup.minhash import SCHEMA_VERSION
from scicodepile.errors import ConfigError
from scicodepile.store.base import ObjectStore

_BYTES_PER_ENTRY = 48
"""Per document in a partition: hash + id (16), the argsort (8), sorted copies (16), edge masks."""

DEFAULT_MEMORY_BUDGET = 512 * 1024 * 1024

_ENTRY = np.dtype([("h", "<u8"), ("g", "<i8")])


def partitions_for(n_docs: int, memory_budget_bytes: int) -> int:
    """How many on-disk partitions per band keep one partition's sort within the budget."""
    if memory_budget_bytes <= 0:
        raise ConfigError(
            "dedup memory budget must be positive", setting="SCICODEPILE_DEDUP_MEMORY_BUDGET_MB"
        )
    return max(1, math.ceil(n_docs * _BYTES_PER_ENTRY / memory_budget_bytes))


class UnionFind:
    """Vectorised union-find over ``0..n-1``: each root is the smallest id of its set.

    Unions hook the larger root under the smaller one (``np.minimum.at`` settles conflicting
    proposals), so parents only decrease and no cycle can form; pointer jumping keeps trees flat.
    """

    def __init__(self, n: int) -> None:
        self.parent = np.arange(n, dtype=np.int64)

    def find(self, x: np.ndarray) -> np.ndarray:
        parent = self.parent
        while True:
            px = parent[x]
            if np.array_equal(px, x):
                return x
            x = px

    def union(self, a: np.ndarray, b: np.ndarray) -> None:
        while a.size:
            ra, rb = self.find(a), self.find(b)
            differ = ra != rb
            if not differ.any():
                return
            ra, rb = ra[differ], rb[differ]
            lo, hi = np.minimum(ra, rb), np.maximum(ra, rb)
            np.minimum.at(self.parent, hi, lo)
            a, b = lo, hi

    def compress(self) -> np.ndarray:
        """Point every element straight at its root; return the parent array (= root ids)."""
        parent = self.parent
        while True:
            grand = parent[parent]
            if np.array_equal(grand, parent):
                return parent
            parent[:] = grand


def _star_edges(hashes: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Edges joining every document to the first of its run of equal hashes (sorted in place).

    A star rather than a chain keeps the union-find shallow for big clusters (thousands of copies of
    the same boilerplate file).
    """
    order = np.argsort(hashes, kind="stable")
    h = hashes[order]
    g = ids[order]
    same = h[1:] == h[:-1]
    if not same.any():
        return np.empty(0, np.int64), np.empty(0, np.int64)
    run_start = np.flatnonzero(np.concatenate(([True], ~same)))
    run_of = np.cumsum(np.concatenate(([True], ~same))) - 1
    head = g[run_start][run_of]
    member = np.concatenate(([False], same))
    return head[member], g[member]


def _check_shard(path: Path, key: str, config: MinhashConfig) -> int:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    info = json.loads(meta.get(b"scicodepile.minhash", b"{}"))
    if info.get("slug") != config.slug or info.get("schema_version") != SCHEMA_VERSION:
        raise ConfigError(
            f"signature shard {key} was written with config {info.get('slug')!r} "
            f"(schema {info.get('schema_version')!r}), not {config.slug!r} (schema {SCHEMA_VERSION}); "
            "recompute its signatures",
            setting="SCICODEPILE_DEDUP_*",
        )
    return pq.ParquetFile(path).metadata.num_rows


def _band_column(path: Path, column: str) -> np.ndarray:
    import pyarrow.parquet as pq

    return pq.read_table(path, columns=[column]).column(0).to_numpy()


def find_duplicate_clusters(
    store: ObjectStore,
    signature_keys: Sequence[str],
    config: MinhashConfig,
    workdir: Path,
    *,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET,
) -> dict[str, str]:
    """Map every document that has a near duplicate to its cluster id (its cluster's smallest doc_id).

    Two documents are linked when their hashes agree on any band (LSH); clusters are the connected
    components (so A~B and B~C puts A, B, C together, as in datatrove and The Stack).  Documents
    without a duplicate are absent from the result.  The answer does not depend on how documents
    were split into shards or on shard order.  ``workdir`` receives the downloaded shards and spill
    files and is cleaned afterwards.  See the module docstring for the memory bound.
    """
    import pyarrow.parquet as pq

    workdir = Path(workdir)
    local = workdir / f"minhash-index-{config.slug}"
    shutil.rmtree(local, ignore_errors=True)
    (local / "shards").mkdir(parents=True)
    try:
        paths: list[Path] = []
        counts: list[int] = []
        for i, key in enumerate(signature_keys):
            path = store.get_file(key, local / "shards" / f"{i:06d}.parquet")
            counts.append(_check_shard(path, key, config))
            paths.append(path)
        offsets = np.concatenate(([0], np.cumsum(counts, dtype=np.int64)))
        n_docs = int(offsets[-1])
        if n_docs == 0:
            return {}
        uf = UnionFind(n_docs)
        n_parts = partitions_for(n_docs, memory_budget_bytes)
        for column in config.band_columns:
            if n_parts == 1:
                hashes = np.concatenate([_band_column(p, column) for p in paths])
                uf.union(*_star_edges(hashes, np.arange(n_docs, dtype=np.int64)))
                del hashes
            else:
                _union_band_partitioned(uf, paths, offsets, column, n_parts, local / "spill")
            uf.compress()
        roots = uf.compress()
        sizes = np.bincount(roots, minlength=n_docs)
        in_cluster = sizes[roots] >= 2
        root_of: dict[str, int] = {}
        cluster_name: dict[int, str] = {}
        for i, path in enumerate(paths):
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            rows = np.flatnonzero(in_cluster[lo:hi])
            if rows.size == 0:
                continue
            ids = pq.read_table(path, columns=["doc_id"]).column(0).to_pylist()
            for row, root in zip(rows.tolist(), roots[lo + rows].tolist(), strict=True):
                doc_id = ids[row]
                root_of[doc_id] = root
                best = cluster_name.get(root)
                if best is None or doc_id < best:
                    cluster_name[root] = doc_id
        return {doc_id: cluster_name[root] for doc_id, root in root_of.items()}
    finally:
        shutil.rmtree(local, ignore_errors=True)


def _union_band_partitioned(
    uf: UnionFind, paths: list[Path], offsets: np.ndarray, column: str, n_parts: int, spill: Path
) -> None:
    """One band with its (hash, doc) pairs split by ``hash mod n_parts`` into sorted-alone files."""
    spill.mkdir(parents=True, exist_ok=True)
    files = [open(spill / f"part-{p:05d}.bin", "wb") for p in range(n_parts)]
    try:
        for i, path in enumerate(paths):
            hashes = _band_column(path, column)
            entries = np.empty(hashes.size, dtype=_ENTRY)
            entries["h"] = hashes
            entries["g"] = np.arange(offsets[i], offsets[i + 1], dtype=np.int64)
            part = hashes % np.uint64(n_parts)
            order = np.argsort(part, kind="stable")
            bounds = np.searchsorted(part[order], np.arange(n_parts + 1, dtype=np.uint64))
            entries = entries[order]
            for p in range(n_parts):
                if bounds[p + 1] > bounds[p]:
                    entries[bounds[p] : bounds[p + 1]].tofile(files[p])
    finally:
        for fh in files:
            fh.close()
    for p in range(n_parts):
        path = spill / f"part-{p:05d}.bin"
        entries = np.fromfile(path, dtype=_ENTRY)
        path.unlink()
        if entries.size > 1:
            uf.union(*_star_edges(entries["h"].copy(), entries["g"].copy()))
