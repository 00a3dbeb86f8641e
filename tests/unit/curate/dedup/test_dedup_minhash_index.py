"""MinHash signatures, the LSH index and keeper selection, on generated code-like documents."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from scicodepile.curate.dedup import (
    MinhashConfig,
    find_duplicate_clusters,
    select_keepers,
    write_signature_shard,
)
from scicodepile.curate.dedup import index as index_mod
from scicodepile.curate.dedup import minhash as minhash_mod
from scicodepile.curate.dedup.index import UnionFind, partitions_for
from scicodepile.curate.dedup.minhash import minhash_signatures, shingle_hashes, token_hashes
from scicodepile.errors import ConfigError
from scicodepile.store import LocalObjectStore

VOCAB = [f"name{i}" for i in range(3000)] + ["def", "return", "self", "import", "for", "in", "if"]
CONFIG = MinhashConfig()


def make_doc(rng: random.Random, n_tokens: int = 400) -> list[str]:
    return [rng.choice(VOCAB) for _ in range(n_tokens)]


def render(tokens: list[str]) -> str:
    """Code-ish layout: 8 tokens a line, punctuation between them (ignored by the tokeniser)."""
    lines = [
        " = ".join(tokens[i : i + 2]) + "(" + ", ".join(tokens[i + 2 : i + 8]) + ")"
        for i in range(0, len(tokens), 8)
    ]
    return "\n".join(lines) + "\n"


def mutate(rng: random.Random, tokens: list[str], rate: float) -> list[str]:
    return [rng.choice(VOCAB) if rng.random() < rate else t for t in tokens]


def true_jaccard(a: str, b: str) -> float:
    sa, sb = set(shingle_hashes(a, CONFIG).tolist()), set(shingle_hashes(b, CONFIG).tolist())
    return len(sa & sb) / len(sa | sb)


@pytest.fixture
def store(tmp_path: Path) -> LocalObjectStore:
    return LocalObjectStore(tmp_path / "objects")


@pytest.fixture(scope="module")
def corpus() -> tuple[dict[str, str], list[set[str]]]:
    """60 distinct documents plus planted groups of near copies (about 1-2 % of tokens changed)."""
    rng = random.Random(11)
    docs: dict[str, str] = {}
    groups: list[set[str]] = []
    for i in range(60):
        tokens = make_doc(rng)
        docs[f"doc-{i:03d}"] = render(tokens)
        if i % 6 == 0:
            group = {f"doc-{i:03d}"}
            for k in range(1 + i % 4):
                name = f"near-{i:03d}-{k}"
                docs[name] = render(mutate(rng, tokens, 0.01))
                group.add(name)
            groups.append(group)
    return docs, groups


def index(
    store: LocalObjectStore,
    tmp_path: Path,
    shards: list[list[tuple[str, str]]],
    config: MinhashConfig = CONFIG,
    **kwargs: object,
) -> dict[str, str]:
    keys = []
    for i, shard in enumerate(shards):
        key = f"minhash/{config.slug}/sig-{i:05d}.parquet"
        write_signature_shard(store, key, shard, config)
        keys.append(key)
    return find_duplicate_clusters(store, keys, config, tmp_path / "work", **kwargs)


# ------------------------------------------------------------------------------ signatures
def test_tokens_are_identifiers_case_kept_punctuation_ignored() -> None:
    a = token_hashes("foo_bar(Baz, 42) + héllo")
    b = token_hashes("foo_bar   Baz\n42 ;; héllo")
    assert a.size == 4 and np.array_equal(a, b)
    assert not np.array_equal(token_hashes("Foo"), token_hashes("foo"))
    assert token_hashes("foo bar")[0] == token_hashes("bar foo")[1]  # position independent
    assert token_hashes("+-*/ ()").size == 0 and token_hashes("").size == 0


def test_minhash_estimates_jaccard() -> None:
    rng = random.Random(3)
    base = make_doc(rng, 2000)
    for rate in (0.01, 0.05, 0.1, 0.2):
        a, b = render(base), render(mutate(rng, base, rate))
        sig = minhash_signatures([shingle_hashes(a, CONFIG), shingle_hashes(b, CONFIG)], CONFIG)
        estimate, truth = float((sig[0] == sig[1]).mean()), true_jaccard(a, b)
        sigma = (truth * (1 - truth) / CONFIG.num_perm) ** 0.5
        assert abs(estimate - truth) < 4 * sigma + 0.01, (rate, estimate, truth)


def test_long_documents_are_chunked_without_changing_the_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    shingles = [shingle_hashes(render(make_doc(rng, n)), CONFIG) for n in (9, 700, 5000)]
    whole = minhash_signatures(shingles, CONFIG)
    monkeypatch.setattr(minhash_mod, "_CHUNK_ROWS", 64)
    assert np.array_equal(minhash_signatures(shingles, CONFIG), whole)
    expected = np.stack(
        [
            (
                (s >> np.uint64(32)).astype(np.uint32)[:, None] * minhash_mod._parameters(CONFIG)[1]
                + minhash_mod._parameters(CONFIG)[2]
            ).min(axis=0)
            for s in shingles
        ]
    )
    assert np.array_equal(whole, expected)


def test_signature_shard_layout_manifest_and_short_docs(store: LocalObjectStore, tmp_path: Path) -> None:
    docs = [
        ("a", "one two three four five six"),
        ("short", "too short here"),
        ("empty", ""),
        ("b", "one two three four five six"),
    ]
    manifest = write_signature_shard(store, "sig/x.parquet", iter(docs), CONFIG)
    assert manifest["rows"] == 2 and manifest["skipped_short"] == 2 and manifest["key"] == "sig/x.parquet"
    assert manifest["config"] == CONFIG.slug and manifest["bytes"] == store.stat("sig/x.parquet").size
    assert json.loads(store.get_bytes("sig/x.manifest.json")) == manifest
    table = pq.read_table(store.get_file("sig/x.parquet", tmp_path / "x.parquet"))
    assert table.column_names == ["doc_id", *CONFIG.band_columns, "minhashes"]
    assert str(table.schema.field("band_000").type) == "uint64"
    rows = table.to_pylist()
    assert rows[0]["doc_id"] == "a" and rows[0] == {**rows[1], "doc_id": "a"}  # same text, same bands
    sig = np.array([rows[0]["minhashes"]], dtype=np.uint32)
    assert sig.shape == (1, CONFIG.num_perm)
    assert minhash_mod.band_hashes(sig, CONFIG)[0].tolist() == [rows[0][c] for c in CONFIG.band_columns]
    plain = MinhashConfig(verify=False)  # without verification the minima are not stored
    write_signature_shard(store, "sig/p.parquet", iter(docs), plain)
    plain_table = pq.read_table(store.get_file("sig/p.parquet", tmp_path / "p.parquet"))
    assert plain_table.column_names == ["doc_id", *plain.band_columns]
    assert plain_table.drop(["doc_id"]).equals(table.drop(["doc_id", "minhashes"]))


def test_signatures_are_deterministic_and_seeded(store: LocalObjectStore, tmp_path: Path) -> None:
    doc = [("d", render(make_doc(random.Random(1))))]
    write_signature_shard(store, "s1.parquet", doc, CONFIG)
    write_signature_shard(store, "s2.parquet", doc, CONFIG)
    write_signature_shard(store, "s3.parquet", doc, MinhashConfig(seed=2))
    one, two, other = (
        pq.read_table(store.get_file(k, tmp_path / k)).to_pylist()[0]
        for k in ("s1.parquet", "s2.parquet", "s3.parquet")
    )
    assert one == two and one != other


# ------------------------------------------------------------------------------ clusters
def test_near_duplicates_found_and_distinct_files_not_merged(store, tmp_path, corpus) -> None:
    docs, groups = corpus
    clusters = index(store, tmp_path, [list(docs.items())])
    for group in groups:
        ids = {clusters.get(d) for d in group}
        assert ids == {min(group)}, group  # one cluster, named after its smallest doc_id
    assert set(clusters) == set().union(*groups)  # nothing else merged
    for a, b in (("doc-001", "doc-002"), ("doc-000", "doc-006")):
        assert true_jaccard(docs[a], docs[b]) < 0.1


def test_chains_are_transitive(store: LocalObjectStore, tmp_path: Path) -> None:
    rng = random.Random(8)
    base = make_doc(rng, 600)
    # A and C share only the middle: far apart, but each is close to B
    a = base[:400]
    b = base[100:500]
    c = base[200:600]
    docs = [("a", render(a)), ("b", render(b)), ("c", render(c))]
    assert true_jaccard(render(a), render(c)) < 0.5
    clusters = index(store, tmp_path, [docs], MinhashConfig(num_perm=200, bands=50, rows=4, threshold=0.4))
    assert clusters == {"a": "a", "b": "a", "c": "a"}


def test_shard_by_shard_equals_all_at_once(store, tmp_path, corpus) -> None:
    docs, _ = corpus
    items = list(docs.items())
    whole = index(store, tmp_path / "one", [items])
    shuffled = items[:]
    random.Random(2).shuffle(shuffled)
    split = [shuffled[i::5] for i in range(5)] + [[]]  # an empty shard too
    assert index(store, tmp_path / "many", split) == whole
    assert len(whole) > 10


@pytest.mark.parametrize("verify", [True, False])
def test_memory_bounded_path_matches_in_memory(store, tmp_path, corpus, monkeypatch, verify) -> None:
    docs, _ = corpus
    items = list(docs.items()) + list(borderline_pairs()[0].items())
    config = MinhashConfig(verify=verify)
    in_memory = index(store, tmp_path / "mem", [items[:40], items[40:]], config)
    assert len(in_memory) > 10
    budget = 256  # bytes: forces many on-disk partitions per band
    assert partitions_for(len(items), budget) > 10
    spilled: list[int] = []
    real = index_mod._union_band_partitioned

    def spy(*args, **kwargs):
        spilled.append(args[4])
        return real(*args, **kwargs)

    monkeypatch.setattr(index_mod, "_union_band_partitioned", spy)
    bounded = index(store, tmp_path / "disk", [items[:40], items[40:]], config, memory_budget_bytes=budget)
    assert bounded == in_memory
    assert len(spilled) == config.bands and min(spilled) > 10
    assert not any((tmp_path / "disk" / "work").iterdir())  # spill files cleaned up


LOOSE = {"num_perm": 250, "bands": 50, "rows": 5, "threshold": 0.55}
"""LSH midpoint 0.46: pairs of Jaccard 0.3-0.4 become candidates often, so verification has work."""


def borderline_pairs() -> tuple[dict[str, str], dict[tuple[str, str], float]]:
    """40 pairs far below 0.55 (about 0.2-0.4) and 10 pairs far above (about 0.9), with true Jaccard."""
    rng = random.Random(21)
    docs: dict[str, str] = {}
    truth: dict[tuple[str, str], float] = {}
    for i in range(50):
        base = make_doc(rng, 500)
        rate = 0.135 if i < 40 else 0.005
        a, b = f"pair-{i:02d}-a", f"pair-{i:02d}-b"
        docs[a], docs[b] = render(base), render(mutate(rng, base, rate))
        truth[(a, b)] = true_jaccard(docs[a], docs[b])
    return docs, truth


def test_verification_drops_band_collisions_below_the_threshold(store, tmp_path) -> None:
    docs, truth = borderline_pairs()
    assert sum(j < 0.45 for j in truth.values()) == 40 and sum(j > 0.85 for j in truth.values()) == 10
    items = list(docs.items())
    plain = index(store, tmp_path / "plain", [items], MinhashConfig(**LOOSE, verify=False))
    verified = index(store, tmp_path / "verified", [items], MinhashConfig(**LOOSE))

    def joined(clusters: dict[str, str]) -> set[tuple[str, str]]:
        return {pair for pair in truth if pair[0] in clusters and clusters[pair[0]] == clusters.get(pair[1])}

    high = {pair for pair, j in truth.items() if j > 0.85}
    false_plain = joined(plain) - high
    assert len(false_plain) >= 3, "the loose bands should let some dissimilar pairs collide"
    assert joined(verified) == high  # every true pair kept, every dissimilar collision refused
    assert set(verified) == {d for pair in high for d in pair}  # no other document joined


def test_verified_clusters_do_not_depend_on_shard_order(store, tmp_path, corpus) -> None:
    docs = {**corpus[0], **borderline_pairs()[0]}
    config = MinhashConfig(**LOOSE)
    items = list(docs.items())
    whole = index(store, tmp_path / "one", [items], config)
    for seed in (1, 2, 3):
        shuffled = items[:]
        random.Random(seed).shuffle(shuffled)
        split = [shuffled[i::4] for i in range(4)]
        assert index(store, tmp_path / f"split-{seed}", split, config) == whole


def test_signatures_of_another_config_are_refused(store: LocalObjectStore, tmp_path: Path) -> None:
    for i, other in enumerate((MinhashConfig(seed=4), MinhashConfig(verify=False))):
        key = f"sig/other-{i}.parquet"
        write_signature_shard(store, key, [("a", "one two three four five six")], other)
        with pytest.raises(ConfigError, match="recompute"):
            find_duplicate_clusters(store, [key], CONFIG, tmp_path)
    assert find_duplicate_clusters(store, [], CONFIG, tmp_path) == {}


def test_union_find_matches_a_reference() -> None:
    rng = np.random.default_rng(0)
    n = 2000
    a, b = rng.integers(0, n, 1500), rng.integers(0, n, 1500)
    uf = UnionFind(n)
    uf.union(a[:700], b[:700])
    uf.union(a[700:], b[700:])
    roots = uf.compress()
    ref = list(range(n))

    def find(x: int) -> int:
        while ref[x] != x:
            ref[x] = ref[ref[x]]
            x = ref[x]
        return x

    for x, y in zip(a.tolist(), b.tolist(), strict=True):
        ref[max(find(x), find(y))] = min(find(x), find(y))
    assert [find(x) for x in range(n)] == roots.tolist()  # roots are each set's smallest member


# ------------------------------------------------------------------------------ keepers
def test_keeper_rule_is_honoured() -> None:
    clusters = {"a": "a", "b": "a", "c": "a", "x": "x", "y": "x"}
    # (not permissive, -stars, -forks, -pushed): permissive first, then stars, forks, recency
    meta = {
        "a": (1, -500, 0, 0),
        "b": (0, -3, 0, 0),
        "c": (0, -10, 0, 0),
        "x": (0, -5, -2, -10),
        "y": (0, -5, -2, -20),
    }
    drop = select_keepers(clusters, lambda d: meta[d])
    assert drop == {"a", "b", "x"}  # c: permissive with most stars; y: tie on stars/forks, more recent
    assert select_keepers({"p": "p", "q": "p"}, lambda d: (0,)) == {"q"}  # ties: smaller doc_id kept
    assert select_keepers({}, lambda d: (0,)) == set()
