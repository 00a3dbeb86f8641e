"""Near-duplicate removal: our MinHash LSH stage against datatrove 0.10.1's MinHash pipeline.

Corpus: real Python files from the project's own venv (site-packages, 100 B - 64 KB, sorted then
sampled with a fixed seed), exact duplicates removed first with ``content_sha256`` (as the curate
stage does), plus planted near-duplicates: mutated copies of 15 % of the files (lines deleted,
duplicated, identifiers renamed, comments inserted).  70 % of the copies are light edits (0.5-5 % of
lines: a fork, a vendored copy, a version bump); 30 % are heavy (5-30 %), so some copies sit near or
below the 0.7 threshold on purpose.  Knobs: ``BENCH_DEDUP_FILES`` (5000), ``BENCH_DEDUP_PLANT_SHARE``
(0.15), ``BENCH_DEDUP_HEAVY_SHARE`` (0.3).  Both sides read the same JSONL file in the same run.

ours: ``write_signature_shard`` (4 shards) -> ``find_duplicate_clusters`` -> ``select_keepers`` ->
a filter pass writing the kept documents as JSONL; one process, one core.
peer: datatrove's signatures -> buckets -> cluster -> filter with ``LocalPipelineExecutor`` and one
worker, in ``bench/.venv-datatrove`` (created by ``scripts/bench-datatrove-env.sh`` when missing).

metric ``files_per_s``: input files / wall seconds of the four passes (interpreter start-up and imports
excluded on both sides).  Same parameters: 5-gram shingles, 250 permutations = 25 bands x 10, seed 1.
Differences that remain (each side's own design): datatrove lowercases, turns digits into ``0``,
splits on punctuation including ``_`` and tokenises with spaCy; ours keeps case and identifiers
whole (The Stack's ``[A-Za-z_0-9]+`` tokens).  datatrove permutes 64-bit xxhash values mod 2**61-1;
ours permutes 32-bit values mod 2**32 and folds each band into one 64-bit hash (datatrove compares the
10 values of a band as a tuple).  Neither verifies candidates against exact Jaccard.

``agreement``: Jaccard index of the two sets of REMOVED documents when the same keeper rule (keep
the smallest line index of each cluster) is applied to both sides' clusters, so the figure measures
the clustering, not the two keeper rules.  Also reported: ``flagged_jaccard`` (documents that have
any duplicate), ``pair_f1`` (pairwise F1 over same-cluster pairs, datatrove as reference),
``planted_recall_*`` (planted copies found in the cluster of their original), ``self_agreement``
(the same figure between our stage with seed 1 and with seed 2: the chance disagreement of LSH on
pairs near the threshold, i.e. the ceiling any two implementations can reach on this corpus) and
``peak_rss_mb`` (peak resident memory of our process, during the timed passes).
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

from _common import ROOT, emit

N_FILES = int(os.environ.get("BENCH_DEDUP_FILES", "5000"))
PLANT_SHARE = float(os.environ.get("BENCH_DEDUP_PLANT_SHARE", "0.15"))
HEAVY_SHARE = float(os.environ.get("BENCH_DEDUP_HEAVY_SHARE", "0.3"))
MAX_BYTES = 64 * 1024
SEED = 7
PEER_VENV = ROOT / "bench" / ".venv-datatrove"
PEER_NAME = "datatrove 0.10.1"
_IDENT = re.compile(r"\b[A-Za-z_][A-Za-z0-9_]{3,}\b")


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
    # not timed: the same stage with another seed, to measure how much two LSH runs disagree by chance
    other = MinhashConfig(seed=2)
    key = f"minhash/{other.slug}/sig-all.parquet"
    write_signature_shard(store, key, (d for s in range(n_shards) for d in docs(s)), other)
    clusters_seed2 = find_duplicate_clusters(store, [key], other, work / "index")
    print(
        json.dumps(
            {
                "seconds": seconds,
                "total_s": total,
                "kept": kept,
                "peak_rss_mb": peak,
                "clusters": [[int(d), int(c)] for d, c in clusters.items()],
                "clusters_seed2": [[int(d), int(c)] for d, c in clusters_seed2.items()],
            }
        )
    )


# ----------------------------------------------------------------------------------- compare
def _partition(pairs: list[list[int]]) -> dict[int, int]:
    """doc -> canonical cluster id (smallest member) from ``[doc, any_cluster_label]`` pairs."""
    members: dict[int, list[int]] = defaultdict(list)
    for doc, label in pairs:
        members[label].append(doc)
    return {doc: min(docs) for docs in members.values() if len(docs) >= 2 for doc in docs}


def _removed(part: dict[int, int]) -> set[int]:
    return {doc for doc, head in part.items() if doc != head}


def _pair_count(sizes: Counter) -> int:
    return sum(n * (n - 1) // 2 for n in sizes.values())


def compare(ours: dict[int, int], peer: dict[int, int], planted: dict[int, int]) -> dict[str, float]:
    """Agreement figures between two partitions (see the module docstring)."""
    r_ours, r_peer = _removed(ours), _removed(peer)
    agreement = len(r_ours & r_peer) / max(1, len(r_ours | r_peer))
    f_ours, f_peer = set(ours), set(peer)
    flagged = len(f_ours & f_peer) / max(1, len(f_ours | f_peer))
    both = _pair_count(Counter((ours[d], peer[d]) for d in f_ours & f_peer))
    p_ours, p_peer = _pair_count(Counter(ours.values())), _pair_count(Counter(peer.values()))
    precision, recall = both / max(1, p_ours), both / max(1, p_peer)
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 1.0

    def planted_recall(part: dict[int, int]) -> float:
        found = sum(1 for copy, orig in planted.items() if copy in part and part.get(orig) == part[copy])
        return found / max(1, len(planted))

    return {
        "agreement": round(agreement, 4),
        "flagged_jaccard": round(flagged, 4),
        "pair_f1": round(f1, 4),
        "removed_ours": len(r_ours),
        "removed_peer": len(r_peer),
        "planted_recall_ours": round(planted_recall(ours), 4),
        "planted_recall_peer": round(planted_recall(peer), 4),
    }


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
    n = facts["files"]
    ours_part = _partition(ours["clusters"])
    figures = compare(ours_part, _partition(peer["clusters"]), facts["planted"])
    floor = compare(ours_part, _partition(ours["clusters_seed2"]), facts["planted"])
    emit(
        "dedup",
        "files_per_s",
        n / ours["total_s"],
        n / peer["total_s"],
        PEER_NAME,
        **figures,
        self_agreement=floor["agreement"],
        peak_rss_mb=round(ours["peak_rss_mb"], 1),
        files=n,
        mb=round(facts["bytes"] / 1e6, 1),
        planted=len(facts["planted"]),
        kept_ours=ours["kept"],
        kept_peer=peer["kept"],
        seconds_ours={k: round(v, 2) for k, v in ours["seconds"].items()},
        seconds_peer={k: round(v, 2) for k, v in peer["seconds"].items()},
        agreement_def="Jaccard of removed-doc sets, same keeper rule (smallest index) on both clusterings",
        config="5-gram, 250 perm = 25 bands x 10 rows, seed 1; one core each",
    )


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--ours":
        run_ours(Path(sys.argv[2]), Path(sys.argv[3]))
    else:
        main()
