"""The LSH index: band collisions -> (verification) -> union-find -> clusters, in bounded memory.

Within a band, documents with equal band hashes form a run.  Without verification every member of a
run is joined to the run's first document (a star).  With ``config.verify``, a run is ordered by a
hash of each document's full signature, and two kinds of candidate edges are checked: each member with
its predecessor (a chain, as datatrove pairs them) and each member not yet connected to the run's head
with the head.  An edge is joined only when the two signatures agree on at least ``config.min_equal``
of ``num_perm`` minima; pairs already in one component are not checked again.  Ordering by signature
(not by position) keeps the answer independent of how documents were split into shards: documents with
equal signatures are adjacent and always joined, so swapping them changes nothing.

Memory bound (documented because the corpus is 3.26 million files and must never sit in RAM):

* the texts are never here, only signature shards (``doc_id`` + one uint64 per band);
* the union-find is one ``int64`` array over all documents: 8 bytes x N (26 MB at 3.26 M);
* with verification, the signatures are copied from the shards into one memory-mapped file under
  ``workdir`` (``4 x num_perm`` bytes a document on disk: 3.3 GB at 3.26 M; pages are read on demand
  for the pairs being checked, in blocks of ``_VERIFY_BLOCK`` pairs), plus an 8-byte order key per
  document;
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
from scicodepile.curate.dedup.minhash import MINHASH_COLUMN, SCHEMA_VERSION, mix64
from scicodepile.errors import ConfigError
from scicodepile.store.base import ObjectStore

_BYTES_PER_ENTRY = 64
"""Per document in a partition: hash + key + id (24), the argsort (8), sorted copies (24), edge masks."""

_VERIFY_BLOCK = 8192
"""Candidate pairs checked at once: 2 x 8192 signatures of 1 KB = 16 MB."""

_READ_ROWS = 65536
"""Rows of a shard's signature column copied to the memory map at once."""

DEFAULT_MEMORY_BUDGET = 512 * 1024 * 1024

_ENTRY = np.dtype([("h", "<u8"), ("k", "<u8"), ("g", "<i8")])


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


class _Verifier:
    """Checks candidate pairs against the full signatures kept in a memory-mapped file."""

    def __init__(self, signatures: np.ndarray, min_equal: int) -> None:
        self.signatures = signatures
        self.min_equal = min_equal
        self.checked = 0

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """Boolean mask: pair ``(a[i], b[i])`` agrees on at least ``min_equal`` minima."""
        self.checked += a.size
        ok = np.empty(a.size, dtype=bool)
        for lo in range(0, a.size, _VERIFY_BLOCK):
            hi = lo + _VERIFY_BLOCK
            equal = np.count_nonzero(self.signatures[a[lo:hi]] == self.signatures[b[lo:hi]], axis=1)
            ok[lo:hi] = equal >= self.min_equal
        return ok


def _join_verified(uf: UnionFind, a: np.ndarray, b: np.ndarray, verify: _Verifier) -> None:
    """Union the pairs not yet in one component that pass ``verify``."""
    if a.size == 0:
        return
    apart = uf.find(a) != uf.find(b)
    a, b = a[apart], b[apart]
    if a.size:
        ok = verify(a, b)
        uf.union(a[ok], b[ok])


def _union_runs(
    uf: UnionFind,
    hashes: np.ndarray,
    ids: np.ndarray,
    keys: np.ndarray | None = None,
    verify: _Verifier | None = None,
) -> None:
    """Join the documents of each run of equal ``hashes`` (see the module docstring).

    Without ``verify``: a star to the run's first document rather than a chain keeps the union-find
    shallow for big clusters (thousands of copies of the same boilerplate file).
    """
    order = np.argsort(hashes, kind="stable") if keys is None else np.lexsort((keys, hashes))
    h = hashes[order]
    g = ids[order]
    same = h[1:] == h[:-1]
    if not same.any():
        return
    new_run = np.concatenate(([True], ~same))
    run_of = np.cumsum(new_run) - 1
    head = g[np.flatnonzero(new_run)][run_of]
    member = ~new_run
    if verify is None:
        uf.union(head[member], g[member])
        return
    _join_verified(uf, g[:-1][same], g[1:][same], verify)  # chain: each member with its predecessor
    _join_verified(uf, head[member], g[member], verify)  # star: members still apart from their head


def _signature_keys(signatures: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each full signature row: equal signatures, equal keys."""
    weights = np.random.Generator(np.random.PCG64(0x5C1C0DE)).integers(
        0, 2**64, size=signatures.shape[1], dtype=np.uint64, endpoint=False
    ) | np.uint64(1)
    acc = np.zeros(signatures.shape[0], dtype=np.uint64)
    for j in range(signatures.shape[1]):
        acc += signatures[:, j].astype(np.uint64) * weights[j]
    return mix64(acc)


def _load_signatures(
    paths: list[Path], offsets: np.ndarray, config: MinhashConfig, target: Path
) -> tuple[np.ndarray, np.ndarray]:
    """Copy every shard's minima into one memory map at ``target``; return it and the order keys."""
    import pyarrow.parquet as pq

    n_docs = int(offsets[-1])
    signatures = np.lib.format.open_memmap(
        target, mode="w+", dtype=np.uint32, shape=(n_docs, config.num_perm)
    )
    keys = np.empty(n_docs, dtype=np.uint64)
    for i, path in enumerate(paths):
        row = int(offsets[i])
        shard = pq.ParquetFile(path)
        for batch in shard.iter_batches(batch_size=_READ_ROWS, columns=[MINHASH_COLUMN], use_threads=False):
            block = batch.column(0).flatten().to_numpy().reshape(-1, config.num_perm)
            signatures[row : row + block.shape[0]] = block
            keys[row : row + block.shape[0]] = _signature_keys(block)
            row += block.shape[0]
    signatures.flush()
    return signatures, keys


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

    Two documents are linked when their hashes agree on any band (LSH) and, with ``config.verify``,
    their full signatures estimate a Jaccard of at least ``config.threshold``; clusters are the
    connected components (so A~B and B~C puts A, B, C together, as in datatrove and The Stack).  Documents
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
        verify: _Verifier | None = None
        keys: np.ndarray | None = None
        if config.verify:
            signatures, keys = _load_signatures(paths, offsets, config, local / "signatures.npy")
            verify = _Verifier(signatures, config.min_equal)
        n_parts = partitions_for(n_docs, memory_budget_bytes)
        for column in config.band_columns:
            if n_parts == 1:
                hashes = np.concatenate([_band_column(p, column) for p in paths])
                _union_runs(uf, hashes, np.arange(n_docs, dtype=np.int64), keys, verify)
                del hashes
            else:
                _union_band_partitioned(uf, paths, offsets, column, n_parts, local / "spill", keys, verify)
            uf.compress()
        if verify is not None:
            del verify, signatures
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
    uf: UnionFind,
    paths: list[Path],
    offsets: np.ndarray,
    column: str,
    n_parts: int,
    spill: Path,
    keys: np.ndarray | None = None,
    verify: _Verifier | None = None,
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
            entries["k"] = 0 if keys is None else keys[offsets[i] : offsets[i + 1]]
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
            keys_p = None if keys is None else entries["k"].copy()
            _union_runs(uf, entries["h"].copy(), entries["g"].copy(), keys_p, verify)
