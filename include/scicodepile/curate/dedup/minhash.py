"""MinHash signatures over token shingles, vectorised with numpy, written as Parquet shards.

Tokens are maximal runs of ``[A-Za-z0-9_]`` and non-ASCII characters, case kept: The Stack's
near-dedup tokeniser (bigcode ``NON_ALPHA = [^A-Za-z_0-9]``) except that non-ASCII text (comments in
other scripts) counts as words instead of vanishing.  A shingle is ``ngram`` consecutive tokens.
Documents with fewer than ``ngram`` tokens have no shingle and are left to exact dedup, as datatrove
does.

Everything is numpy over the UTF-8 bytes, no Python loop per token:

* token hash: a polynomial hash mod 2**64 computed for all tokens at once from one ``cumsum``
  (``sum c_t * B**(e-1-t)`` = ``B**(e-1) * (S[e] - S[s])`` with ``S = cumsum(c_t * B**-t)``; ``B`` is
  odd so it is invertible mod 2**64), then a murmur3 finaliser;
* shingle hash: ``sum_k K_k * tok[i+k]`` for odd random ``K_k`` (order-sensitive), finalised again;
* permutations: ``h -> A_j * h + C_j mod 2**32`` on the high 32 bits of the shingle hash, with odd
  ``A_j`` (a bijection of 32-bit values; the inputs are already well mixed, so these behave as
  independent random permutations for min-wise hashing; a unit test checks the Jaccard estimate
  against the true value), one ``(shingles x num_perm)`` block at a time, reduced with ``min``.

Each band's ``rows`` minima are folded into one 64-bit hash; a signature shard stores ``doc_id``, one
``uint64`` column per band (all plain LSH needs) and, when ``config.verify``, the ``num_perm`` minima
themselves (``minhashes``, a fixed-size list of uint32) so the index can check each candidate pair.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from scicodepile.curate.dedup.config import MinhashConfig
from scicodepile.store.base import ObjectStore, sha256_file
from scicodepile.store.keys import manifest_key

_U64 = np.uint64
_M1 = _U64(0xFF51AFD7ED558CCD)
_M2 = _U64(0xC4CEB9FE1A85EC53)
_S33 = _U64(33)
_S32 = _U64(32)
_TOKEN_BASE = 0x100000001B3  # odd: invertible mod 2**64
_TOKEN_BASE_INV = pow(_TOKEN_BASE, -1, 2**64)

_CHUNK_ROWS = 2048
"""Shingles per permutation block: 2048 x 250 x 8 bytes = 4 MB, small enough to stay in cache."""

_BATCH_DOCS = 512
"""Documents hashed together (amortises numpy call overhead over many small files)."""

SCHEMA_VERSION = 2
"""Bumped when the hashing changes, so old signature shards are refused instead of mismatched."""

MINHASH_COLUMN = "minhashes"
"""Shard column with all ``num_perm`` minima of a document (only when ``config.verify``)."""

_WORD = np.zeros(256, dtype=bool)
for _c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_":
    _WORD[_c] = True
_WORD[0x80:] = True  # bytes of non-ASCII characters
_BYTE_VALUE = np.arange(1, 257, dtype=np.uint64)  # never 0, so leading bytes count


def mix64(x: np.ndarray) -> np.ndarray:
    """murmur3's 64-bit finaliser, in place on a uint64 array (a bijection with full avalanche)."""
    x ^= x >> _S33
    x *= _M1
    x ^= x >> _S33
    x *= _M2
    x ^= x >> _S33
    return x


class _Powers:
    """``B**k`` and ``B**-k`` mod 2**64 for k < n, grown on demand (shared by all documents)."""

    def __init__(self) -> None:
        self.pos = np.ones(1, dtype=np.uint64)
        self.neg = np.ones(1, dtype=np.uint64)

    def ensure(self, n: int) -> None:
        if n <= self.pos.size:
            return
        size = max(n, 2 * self.pos.size, 1 << 16)
        self.pos = np.empty(size, dtype=np.uint64)
        self.neg = np.empty(size, dtype=np.uint64)
        self.pos[0] = self.neg[0] = 1
        # cumprod wraps mod 2**64, which is exactly the arithmetic wanted
        self.pos[1:] = _U64(_TOKEN_BASE)
        self.neg[1:] = _U64(_TOKEN_BASE_INV)
        np.cumprod(self.pos, out=self.pos)
        np.cumprod(self.neg, out=self.neg)


_POWERS = _Powers()


@lru_cache(maxsize=16)
def _parameters(config: MinhashConfig) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Shingle weights, permutation coefficients and band-fold weights, fixed by the seed (the same in
    every worker)."""
    gen = np.random.Generator(np.random.PCG64(config.seed))
    weights = gen.integers(0, 2**64, size=config.ngram, dtype=np.uint64, endpoint=False) | _U64(1)
    mult = gen.integers(0, 2**32, size=config.num_perm, dtype=np.uint32, endpoint=False) | np.uint32(1)
    add = gen.integers(0, 2**32, size=config.num_perm, dtype=np.uint32, endpoint=False)
    fold = gen.integers(0, 2**64, size=config.rows, dtype=np.uint64, endpoint=False) | _U64(1)
    return weights, mult, add, fold


def token_hashes(text: str) -> np.ndarray:
    """64-bit hashes of the tokens of ``text``, in order (see the module docstring)."""
    buf = np.frombuffer(text.encode("utf-8", "surrogatepass"), dtype=np.uint8)
    if buf.size == 0:
        return np.empty(0, dtype=np.uint64)
    word = _WORD[buf]
    edges = np.diff(word.view(np.int8), prepend=np.int8(0), append=np.int8(0))
    starts = np.flatnonzero(edges == 1)
    if starts.size == 0:
        return np.empty(0, dtype=np.uint64)
    ends = np.flatnonzero(edges == -1)
    _POWERS.ensure(buf.size + 1)
    prefix = np.empty(buf.size + 1, dtype=np.uint64)
    prefix[0] = 0
    np.cumsum(_BYTE_VALUE[buf] * _POWERS.neg[: buf.size], out=prefix[1:])
    tokens = (prefix[ends] - prefix[starts]) * _POWERS.pos[ends - 1]
    return mix64(tokens)


def shingle_hashes(text: str, config: MinhashConfig) -> np.ndarray:
    """64-bit hashes of the ``config.ngram``-token shingles of ``text`` (empty when too short)."""
    tokens = token_hashes(text)
    count = tokens.size - config.ngram + 1
    if count <= 0:
        return np.empty(0, dtype=np.uint64)
    weights = _parameters(config)[0]
    acc = tokens[:count] * weights[0]
    for k in range(1, config.ngram):
        acc += tokens[k : k + count] * weights[k]
    return mix64(acc)


def minhash_signatures(shingles: list[np.ndarray], config: MinhashConfig) -> np.ndarray:
    """``(len(shingles), num_perm)`` uint32 minima; every array in ``shingles`` must be non-empty.

    The permutations work on the high 32 bits of each shingle hash: uint32 arithmetic runs twice as
    wide in SIMD as uint64, and a false 32-bit tie between two minima (2**-32) is negligible next to
    MinHash's own variance.  Memory is bounded by one ``_CHUNK_ROWS x num_perm`` block however long
    a document is.
    """
    _, mult, add, _ = _parameters(config)
    n_docs = len(shingles)
    sig = np.empty((n_docs, config.num_perm), dtype=np.uint32)
    block = np.empty((_CHUNK_ROWS, config.num_perm), dtype=np.uint32)
    for i, sh in enumerate(shingles):
        if sh.size == 0:
            raise ValueError("minhash_signatures needs at least one shingle per document")
        values = (sh >> _S32).astype(np.uint32)
        for lo in range(0, values.size, _CHUNK_ROWS):
            part = values[lo : lo + _CHUNK_ROWS]
            rows = block[: part.size]
            np.multiply(part[:, None], mult[None, :], out=rows)
            rows += add
            if lo == 0:
                rows.min(axis=0, out=sig[i])
            else:
                np.minimum(sig[i], rows.min(axis=0), out=sig[i])
    return sig


def band_hashes(signatures: np.ndarray, config: MinhashConfig) -> np.ndarray:
    """Fold each band's ``rows`` minima into one 64-bit hash: ``(n_docs, bands)`` uint64."""
    sig = signatures.reshape(signatures.shape[0], config.bands, config.rows)
    acc = np.zeros(sig.shape[:2], dtype=np.uint64)
    fold = _parameters(config)[3]
    for r in range(config.rows):
        acc += mix64(sig[:, :, r].astype(np.uint64)) * fold[r]
    return mix64(acc)


def signature_batches(
    docs: Iterable[tuple[str, str]], config: MinhashConfig, batch_docs: int = _BATCH_DOCS
) -> Iterator[tuple[list[str], np.ndarray, list[str]]]:
    """Yield ``(doc_ids, signatures, skipped_doc_ids)`` per batch of documents.

    ``signatures`` is ``(len(doc_ids), num_perm)`` uint32 (:func:`minhash_signatures`);
    ``skipped_doc_ids`` have fewer than ``ngram`` tokens, hence no signature.
    """
    ids: list[str] = []
    shingles: list[np.ndarray] = []
    skipped: list[str] = []
    for doc_id, text in docs:
        sh = shingle_hashes(text, config)
        if sh.size:
            ids.append(doc_id)
            shingles.append(sh)
        else:
            skipped.append(doc_id)
        if len(ids) + len(skipped) >= batch_docs:
            yield ids, minhash_signatures(shingles, config), skipped
            ids, shingles, skipped = [], [], []
    if ids or skipped:
        yield ids, minhash_signatures(shingles, config), skipped


def _schema(config: MinhashConfig) -> Any:  # pyarrow.Schema
    import pyarrow as pa

    fields = [pa.field("doc_id", pa.string(), nullable=False)]
    fields += [pa.field(name, pa.uint64(), nullable=False) for name in config.band_columns]
    if config.verify:
        fields.append(pa.field(MINHASH_COLUMN, pa.list_(pa.uint32(), config.num_perm), nullable=False))
    meta = {"scicodepile.minhash": json.dumps({"slug": config.slug, "schema_version": SCHEMA_VERSION})}
    return pa.schema(fields, metadata=meta)


def write_signature_shard(
    store: ObjectStore, key: str, docs: Iterable[tuple[str, str]], config: MinhashConfig
) -> dict[str, Any]:
    """Hash ``(doc_id, text)`` pairs into a Parquet signature shard at ``key``; return its manifest.

    Streams: memory holds one batch of documents and its signatures, never the texts of the whole
    shard.  The shard is uploaded atomically, then a manifest beside it
    (``<key without .parquet>.manifest.json``) whose presence marks the shard complete.  The manifest
    counts ``rows`` (documents with a signature) and ``skipped_short`` (too few tokens to shingle).
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _schema(config)
    rows = skipped = 0
    with tempfile.TemporaryDirectory(prefix="scp-minhash-") as tmp:
        path = Path(tmp) / "signatures.parquet"
        with pq.ParquetWriter(path, schema, compression="zstd", use_dictionary=False) as writer:
            for ids, signatures, skipped_ids in signature_batches(docs, config):
                skipped += len(skipped_ids)
                if not ids:
                    continue
                bands = band_hashes(signatures, config)
                columns = [pa.array(ids, pa.string())]
                columns += [pa.array(bands[:, b]) for b in range(config.bands)]
                if config.verify:
                    flat = pa.array(signatures.reshape(-1))
                    columns.append(pa.FixedSizeListArray.from_arrays(flat, config.num_perm))
                writer.write_table(pa.Table.from_arrays(columns, schema=schema))
                rows += len(ids)
        size = store.put_file(key, path, "application/vnd.apache.parquet")
        manifest = {
            "key": key,
            "rows": rows,
            "skipped_short": skipped,
            "bytes": size,
            "sha256": sha256_file(path),
            "config": config.slug,
            "schema_version": SCHEMA_VERSION,
        }
    store.put_bytes(manifest_key(key), json.dumps(manifest, indent=2).encode(), "application/json")
    return manifest
