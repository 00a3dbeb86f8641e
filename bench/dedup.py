"""Near-duplicate removal: our MinHash LSH stage against datatrove 0.10.1's MinHash pipeline.

Corpus: real Python files from the project's own venv (site-packages, 100 B - 64 KB, sorted then
sampled with a fixed seed), exact duplicates removed first with ``content_sha256`` (as the curate
stage does), plus planted near-duplicates: mutated copies of 15 % of the files (lines deleted,
duplicated, identifiers renamed, comments inserted).  70 % of the copies are light edits (0.5-5 % of
lines: a fork, a vendored copy, a version bump); 30 % are heavy (5-30 %), so some copies sit near or
below the 0.7 threshold on purpose.  Knobs: ``BENCH_DEDUP_FILES`` (5000), ``BENCH_DEDUP_PLANT_SHARE``
(0.15), ``BENCH_DEDUP_HEAVY_SHARE`` (0.3).  Both sides read the same JSONL file in the same run.
site-packages also holds many natural near-duplicates (versions of the same module, vendored copies,
generated files): most pairs in the ambiguous band below are natural, not planted.

ours: ``write_signature_shard`` (4 shards) -> ``find_duplicate_clusters`` -> ``select_keepers`` ->
a filter pass writing the kept documents as JSONL; one process, one core; the default
``MinhashConfig`` (candidates verified against the full 250-value signature, see ``config.py``).
peer: datatrove's signatures -> buckets -> cluster -> filter with ``LocalPipelineExecutor`` and one
worker, in ``bench/.venv-datatrove`` (created by ``scripts/bench-datatrove-env.sh`` when missing).

metric ``files_per_s``: input files / wall seconds of the four passes (interpreter start-up and imports
excluded on both sides).  Same parameters: 5-gram shingles, 250 permutations = 25 bands x 10, seed 1.
Differences that remain (each side's own design): datatrove lowercases, turns digits into ``0``,
splits on punctuation including ``_`` and tokenises with spaCy; ours keeps case and identifiers
whole (The Stack's ``[A-Za-z_0-9]+`` tokens).  datatrove permutes 64-bit xxhash values mod 2**61-1;
ours permutes 32-bit values mod 2**32 and folds each band into one 64-bit hash (datatrove compares the
10 values of a band as a tuple).  datatrove joins every band collision; ours joins a collision only
when the two full signatures agree on >= 175 of 250 minima (estimated Jaccard >= 0.7).

Why a scoped agreement.  A pair of true Jaccard J becomes an LSH candidate with probability
``1 - (1 - J**10)**25``: 5 % at J = 0.54, 51 % at 0.7, 95 % at 0.80.  For a pair inside that band,
whether ANY run (datatrove's, ours, ours with another seed) joins it is a coin flip, so two correct
implementations disagree there by chance; the raw agreement on this corpus is capped near the
self-agreement of one implementation with two seeds.  So the bench measures the truth: after both runs
it computes the EXACT Jaccard of the 5-gram shingle sets of every pair of documents (all pairs, a
sparse documents x shingles product), once under our tokenisation and once under datatrove's (the
shingle sets datatrove's signature step itself produced in the timed run, recorded by reference and
saved after the clock stops, see ``_datatrove_peer.py``).  A pair is ambiguous when either
tokenisation's value, or the span between the two, touches the band where the candidate probability
is 5-95 % (``ambiguous_band``, derived from the S-curve, [0.538, 0.804]); a document is ambiguous when
it belongs to an ambiguous pair.  Every other document has a clear answer: it has a neighbour above
0.80 under both tokenisations (a duplicate) or none above 0.54 (not one).

Agreement figures (each: Jaccard index of the two sets of REMOVED documents when the same keeper rule,
keep the smallest line index of each cluster, is applied to both clusterings, so the figures measure
the clustering, not the keeper rules):

* ``agreement``: over the unambiguous documents only (``agreement_scope`` says so in the line, with
  the count); the target >= 0.95 is about this figure;
* ``agreement_all``: the same over all documents, ambiguous ones included (the raw figure);
* ``removed_in_scope``: how many unambiguous documents each side removed (the size behind ``agreement``);
* ``self_agreement`` / ``self_agreement_all``: ours with seed 1 against ours with seed 2 (the chance
  disagreement of one implementation with itself);
* ``exact_agreement_ours`` / ``exact_agreement_peer``: each side against the exact answer (connected
  components of pairs with exact Jaccard >= 0.7 under that side's tokenisation), unambiguous scope;
* ``without_verify``: the same figures for our stage with ``verify=False`` (plain LSH, like datatrove),
  to show what the verification step changes;
* ``ambiguous_pairs`` / ``ambiguous_planted_pairs`` / ``ambiguous_docs`` / ``scoped_docs`` /
  ``similar_pairs`` (pairs with exact Jaccard >= 0.3 under either tokenisation): the size of the band.

Also reported: ``flagged_jaccard`` (documents that have any duplicate), ``pair_f1`` (pairwise F1 over
same-cluster pairs, datatrove as reference), ``planted_recall_*`` (planted copies found in the cluster
of their original; heavy copies below 0.7 are rightly missed) and ``peak_rss_mb`` (peak resident memory
of our process, during the timed passes).  Only the timed passes of each side count in
``files_per_s``; the seed-2 and unverified runs and the exact Jaccard computation are not timed.
"""

from __future__ import annotations

import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

import numpy as np

from _common import ROOT, emit

VARIANT_NAMES = ("clusters_seed2", "clusters_noverify", "clusters_seed2_noverify")
N_FILES = int(os.environ.get("BENCH_DEDUP_FILES", "5000"))
PLANT_SHARE = float(os.environ.get("BENCH_DEDUP_PLANT_SHARE", "0.15"))
HEAVY_SHARE = float(os.environ.get("BENCH_DEDUP_HEAVY_SHARE", "0.3"))
MAX_BYTES = 64 * 1024
SEED = 7
PEER_VENV = ROOT / "bench" / ".venv-datatrove"
PEER_NAME = "datatrove 0.10.1"
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{3,}\b")
SIMILAR_FLOOR = 0.3
"""Pairs below this true Jaccard under both tokenisations are not kept (they are unambiguous)."""
BAND_PROBABILITY = (0.05, 0.95)
"""The ambiguous band: true Jaccard where 25 x 10 LSH makes a pair a candidate with 5 %-95 %."""


# ----------------------------------------------------------------------------------- corpus
def _source_files() -> list[Path]:
    import sysconfig

    site = Path(sysconfig.get_paths()["purelib"])
    return sorted(p for p in site.rglob("*.py") if p.is_file() and 100 <= p.stat().st_size <= MAX_BYTES)


def _mutate(text: str, rate: float, rng: random.Random) -> str:
    """Edit about ``rate`` of the lines: delete, duplicate, rename an identifier, insert a comment."""
    out: list[str] = []
    for line in text.splitlines():
        if rng.random() >= rate:
            out.append(line)
            continue
        op = rng.randrange(4)
        if op == 0:
            continue
        if op == 1:
            out += [line, line]
        elif op == 2:
            out.append(_IDENT.sub(lambda m: m.group(0) + "_v2" if rng.random() < 0.5 else m.group(0), line))
        else:
            out += [f"# note {rng.randrange(10**6)}: revisit", line]
    return "\n".join(out) + "\n"


def build_corpus(path: Path) -> dict[str, int]:
    """Write the JSONL corpus; return ``{"planted": index_of_copy -> index_of_original}`` facts."""
    sys.path.insert(0, str(ROOT / "include"))
    from scicodepile.curate.dedup import content_sha256

    rng = random.Random(SEED)
    files = _source_files()
    rng.shuffle(files)
    seen: set[str] = set()
    texts: list[str] = []
    n_base = int(N_FILES / (1 + PLANT_SHARE * 1.5))
    for p in files:
        if len(texts) >= n_base:
            break
        try:
            text = p.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        digest = content_sha256(text)
        if digest not in seen:
            seen.add(digest)
            texts.append(text)
    planted: dict[int, int] = {}
    for original in rng.sample(range(len(texts)), int(len(texts) * PLANT_SHARE)):
        for _ in range(rng.choice((1, 1, 2))):
            # most copies are light edits (a fork, a vendored copy, a version bump), some are heavy
            rate = rng.uniform(0.005, 0.05) if rng.random() >= HEAVY_SHARE else rng.uniform(0.05, 0.30)
            copy = _mutate(texts[original], rate, rng)
            digest = content_sha256(copy)
            if digest in seen:
                continue
            seen.add(digest)
            planted[len(texts)] = original
            texts.append(copy)
    with path.open("w", encoding="utf-8") as fh:
        for i, text in enumerate(texts):
            fh.write(json.dumps({"id": f"{i:07d}", "text": text}) + "\n")
    return {"files": len(texts), "planted": planted, "bytes": sum(len(t.encode()) for t in texts)}


# ----------------------------------------------------------------------------------- ours
def run_ours(source: Path, work: Path) -> None:
    """Child process: our four passes over ``source``; print timings, clusters and peak RSS."""
    import resource

    sys.path.insert(0, str(ROOT / "include"))
    from scicodepile.curate.dedup import (
        MinhashConfig,
        find_duplicate_clusters,
        select_keepers,
        write_signature_shard,
    )
    from scicodepile.store import LocalObjectStore

    store = LocalObjectStore(work / "store")
    config = MinhashConfig()
    n_shards = 4
    seconds: dict[str, float] = {}
    start = time.perf_counter()

    def docs(shard: int):
        with source.open(encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if i % n_shards == shard:
                    row = json.loads(line)
                    yield row["id"], row["text"]

    keys = []
    for shard in range(n_shards):
        key = f"minhash/{config.slug}/sig-{shard:05d}.parquet"
        write_signature_shard(store, key, docs(shard), config)
        keys.append(key)
    seconds["signatures"] = time.perf_counter() - start
    t0 = time.perf_counter()
    clusters = find_duplicate_clusters(store, keys, config, work / "index")
    seconds["index"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    drop = select_keepers(clusters, lambda doc_id: (int(doc_id),))
    kept = 0
    with source.open(encoding="utf-8") as fh, (work / "kept.jsonl").open("w", encoding="utf-8") as out:
        for line in fh:
            if json.loads(line)["id"] not in drop:
                out.write(line)
                kept += 1
    seconds["filter"] = time.perf_counter() - t0
    total = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "seconds": seconds,
        "total_s": total,
        "kept": kept,
        "peak_rss_mb": peak,
        "clusters": [[int(d), int(c)] for d, c in clusters.items()],
    }
    # not timed: another seed (how much two runs of one implementation disagree by chance) and the
    # plain LSH without verification (what the verification step changes)
    variants = {
        "clusters_seed2": MinhashConfig(seed=2),
        "clusters_noverify": MinhashConfig(verify=False),
        "clusters_seed2_noverify": MinhashConfig(seed=2, verify=False),
    }
    for name, other in variants.items():
        key = f"minhash/{other.slug}/sig-all.parquet"
        write_signature_shard(store, key, (d for s in range(n_shards) for d in docs(s)), other)
        found = find_duplicate_clusters(store, [key], other, work / "index")
        result[name] = [[int(d), int(c)] for d, c in found.items()]
    print(json.dumps(result))


# ----------------------------------------------------------------------------------- compare
def _partition(pairs: list[list[int]]) -> dict[int, int]:
    """doc -> canonical cluster id (smallest member) from ``[doc, any_cluster_label]`` pairs."""
    members: dict[int, list[int]] = defaultdict(list)
    for doc, label in pairs:
        members[label].append(doc)
    return {doc: min(docs) for docs in members.values() if len(docs) >= 2 for doc in docs}


def _removed(part: dict[int, int]) -> set[int]:
    """Documents dropped when each cluster keeps its smallest index (the same rule on every side)."""
    return {doc for doc, head in part.items() if doc != head}


def _jaccard(a: set[int], b: set[int]) -> float:
    return len(a & b) / len(a | b) if a | b else 1.0


def agreement(a: dict[int, int], b: dict[int, int], scope: set[int] | None = None) -> float:
    """Jaccard index of the two removed sets, counting only documents in ``scope`` (all if None)."""
    ra, rb = _removed(a), _removed(b)
    if scope is not None:
        ra, rb = ra & scope, rb & scope
    return round(_jaccard(ra, rb), 4)


def _pair_count(sizes: Counter) -> int:
    return sum(n * (n - 1) // 2 for n in sizes.values())


def compare(ours: dict[int, int], peer: dict[int, int], planted: dict[int, int]) -> dict[str, float]:
    """Whole-corpus figures between two partitions (see the module docstring)."""
    f_ours, f_peer = set(ours), set(peer)
    both = _pair_count(Counter((ours[d], peer[d]) for d in f_ours & f_peer))
    p_ours, p_peer = _pair_count(Counter(ours.values())), _pair_count(Counter(peer.values()))
    precision, recall = both / max(1, p_ours), both / max(1, p_peer)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 1.0

    def planted_recall(part: dict[int, int]) -> float:
        found = sum(1 for copy, orig in planted.items() if copy in part and part.get(orig) == part[copy])
        return found / max(1, len(planted))

    return {
        "flagged_jaccard": round(_jaccard(f_ours, f_peer), 4),
        "pair_f1": round(f1, 4),
        "removed_ours": len(_removed(ours)),
        "removed_peer": len(_removed(peer)),
        "planted_recall_ours": round(planted_recall(ours), 4),
        "planted_recall_peer": round(planted_recall(peer), 4),
    }


# ----------------------------------------------------------------------------------- true Jaccard
def similar_pairs(sets: list[np.ndarray], floor: float) -> dict[tuple[int, int], float]:
    """Exact Jaccard of every pair of shingle sets with Jaccard >= ``floor`` (all pairs, no sampling).

    A sparse documents x shingles matrix times its transpose counts every pair's shared shingles.
    """
    import scipy.sparse as sp

    sizes = np.array([s.size for s in sets], dtype=np.int64)
    values = np.concatenate(sets) if sets else np.empty(0, np.uint64)
    _, column = np.unique(values, return_inverse=True)
    row = np.repeat(np.arange(len(sets)), sizes)
    matrix = sp.csr_matrix(
        (np.ones(values.size, np.int32), (row, column)), shape=(len(sets), column.max() + 1)
    )
    shared = sp.triu(matrix @ matrix.T, k=1).tocoo()
    jaccard = shared.data / (sizes[shared.row] + sizes[shared.col] - shared.data)
    keep = jaccard >= floor
    return {
        (int(a), int(b)): float(j)
        for a, b, j in zip(shared.row[keep], shared.col[keep], jaccard[keep], strict=True)
    }


def ambiguous_band(probability: tuple[float, float]) -> tuple[float, float]:
    """Jaccard values at which our LSH's (= datatrove's) candidate probability crosses ``probability``."""
    sys.path.insert(0, str(ROOT / "include"))
    from scicodepile.curate.dedup import MinhashConfig

    config = MinhashConfig()

    def solve(p: float) -> float:
        lo, hi = 0.0, 1.0
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if config.candidate_probability(mid) < p else (lo, mid)
        return round(lo, 3)

    return solve(probability[0]), solve(probability[1])


def exact_partition(pairs: dict[tuple[int, int], float], threshold: float) -> dict[int, int]:
    """Connected components of the pairs with exact Jaccard >= threshold (the ideal near-dup answer)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        parent.setdefault(x, x)
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for (a, b), j in pairs.items():
        if j >= threshold:
            ra, rb = find(a), find(b)
            parent[max(ra, rb)] = min(ra, rb)
    return _partition([[doc, find(doc)] for doc in list(parent)])


def scope_figures(
    texts: list[str], peer_sets: list[np.ndarray], planted: dict[int, int]
) -> tuple[set[int], dict, dict[str, dict[int, int]]]:
    """True Jaccard under both tokenisations -> the unambiguous documents, band facts, exact answers."""
    sys.path.insert(0, str(ROOT / "include"))
    from scicodepile.curate.dedup import MinhashConfig
    from scicodepile.curate.dedup.minhash import shingle_hashes

    config = MinhashConfig()
    ours_sets = [np.unique(shingle_hashes(t, config)) for t in texts]
    if len(peer_sets) != len(ours_sets):
        raise SystemExit(f"datatrove recorded {len(peer_sets)} documents, the corpus has {len(ours_sets)}")
    j_ours, j_peer = similar_pairs(ours_sets, SIMILAR_FLOOR), similar_pairs(peer_sets, SIMILAR_FLOOR)
    lo, hi = ambiguous_band(BAND_PROBABILITY)
    ambiguous_pairs: set[tuple[int, int]] = set()
    for pair in j_ours.keys() | j_peer.keys():
        a, b = j_ours.get(pair, 0.0), j_peer.get(pair, 0.0)  # absent: below the floor
        if min(a, b) <= hi and max(a, b) >= lo:  # either side's value (or the span between) in the band
            ambiguous_pairs.add(pair)
    ambiguous_docs = {d for pair in ambiguous_pairs for d in pair}
    scope = set(range(len(texts))) - ambiguous_docs
    planted_pairs = {(min(c, o), max(c, o)) for c, o in planted.items()}
    facts = {
        "ambiguous_band": [lo, hi],
        "ambiguous_pairs": len(ambiguous_pairs),
        "ambiguous_planted_pairs": len(ambiguous_pairs & planted_pairs),
        "ambiguous_docs": len(ambiguous_docs),
        "scoped_docs": len(scope),
        "similar_pairs": len(j_ours.keys() | j_peer.keys()),
    }
    threshold = config.threshold
    exact = {"ours": exact_partition(j_ours, threshold), "peer": exact_partition(j_peer, threshold)}
    return scope, facts, exact


def _ensure_peer_venv() -> Path:
    python = PEER_VENV / "bin" / "python"
    if not (PEER_VENV / ".installed").exists():
        subprocess.run(
            ["bash", str(ROOT / "scripts" / "bench-datatrove-env.sh")],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=sys.stderr,
        )
    return python


def _run_json(cmd: list[str]) -> dict:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[1]} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    peer_python = _ensure_peer_venv()
    with tempfile.TemporaryDirectory(prefix="bench-dedup-") as tmp:
        tmp = Path(tmp)
        corpus = tmp / "corpus.jsonl"
        facts = build_corpus(corpus)
        ours = _run_json([sys.executable, __file__, "--ours", str(corpus), str(tmp / "ours")])
        peer = _run_json(
            [str(peer_python), str(ROOT / "bench" / "_datatrove_peer.py"), str(corpus), str(tmp / "peer")]
        )
        recorded = np.load(tmp / "peer" / "shingles.npz")
        offsets, values = recorded["offsets"], recorded["values"]
        peer_sets = [values[offsets[i] : offsets[i + 1]] for i in range(offsets.size - 1)]
        with corpus.open(encoding="utf-8") as fh:
            texts = [json.loads(line)["text"] for line in fh]
    n = facts["files"]
    planted = facts["planted"]
    scope, band, exact = scope_figures(texts, peer_sets, planted)
    part = {name: _partition(ours[name]) for name in ("clusters", *VARIANT_NAMES)}
    ours_part, peer_part = part["clusters"], _partition(peer["clusters"])
    emit(
        "dedup",
        "files_per_s",
        n / ours["total_s"],
        n / peer["total_s"],
        PEER_NAME,
        agreement=agreement(ours_part, peer_part, scope),
        agreement_scope=(
            f"unambiguous documents only ({len(scope)} of {n}): those with no pair whose true 5-gram "
            f"Jaccard, under our or datatrove's tokenisation, lies in the ambiguous band "
            f"{band['ambiguous_band']} (LSH candidate probability 5-95 %); Jaccard of the two sets of "
            "removed documents, same keeper rule (smallest index) on both clusterings"
        ),
        removed_in_scope={"ours": len(_removed(ours_part) & scope), "peer": len(_removed(peer_part) & scope)},
        agreement_all=agreement(ours_part, peer_part),
        self_agreement=agreement(ours_part, part["clusters_seed2"], scope),
        self_agreement_all=agreement(ours_part, part["clusters_seed2"]),
        exact_agreement_ours=agreement(ours_part, exact["ours"], scope),
        exact_agreement_peer=agreement(peer_part, exact["peer"], scope),
        without_verify={
            "agreement": agreement(part["clusters_noverify"], peer_part, scope),
            "agreement_all": agreement(part["clusters_noverify"], peer_part),
            "self_agreement": agreement(part["clusters_noverify"], part["clusters_seed2_noverify"], scope),
            "self_agreement_all": agreement(part["clusters_noverify"], part["clusters_seed2_noverify"]),
            "exact_agreement": agreement(part["clusters_noverify"], exact["ours"], scope),
        },
        **band,
        **compare(ours_part, peer_part, planted),
        peak_rss_mb=round(ours["peak_rss_mb"], 1),
        files=n,
        mb=round(facts["bytes"] / 1e6, 1),
        planted=len(planted),
        kept_ours=ours["kept"],
        kept_peer=peer["kept"],
        seconds_ours={k: round(v, 2) for k, v in ours["seconds"].items()},
        seconds_peer={k: round(v, 2) for k, v in peer["seconds"].items()},
        config="5-gram, 250 perm = 25 bands x 10 rows, threshold 0.7, seed 1, ours verified; one core each",
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--ours":
        run_ours(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
