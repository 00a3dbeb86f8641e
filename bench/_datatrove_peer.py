"""The peer of bench/dedup.py: datatrove 0.10.1's MinHash pipeline, run in bench/.venv-datatrove.

Usage: ``_datatrove_peer.py INPUT_JSONL WORKDIR``.  Runs datatrove's four stages (signatures ->
buckets -> cluster -> filter) with ``LocalPipelineExecutor``, one worker each (the same single core
our side gets), on the same JSONL file, with The Stack v2's parameters: 5-gram shingles, 25 buckets x
10 hashes = 250 permutations, seed 1, 64-bit xxhash.  Prints one JSON object on stdout: seconds per
stage and in total, the documents kept, and the clusters as ``[[line_index, cluster_id], ...]``
(datatrove numbers documents by their line in the single input file, since one task reads it).

It also writes ``WORKDIR/shingles.npz``: each document's set of shingle hashes exactly as datatrove's
signature stage computed them (its own ``simplify_text``, spaCy word tokenizer and xxhash), so the
bench can compute true Jaccard similarities under datatrove's tokenisation.  The arrays are recorded by
keeping a reference to what ``get_shingles`` returns during the timed run (no extra work in the timed
part; the sets are deduplicated and saved after the clock stops).

Not part of the library: it imports datatrove, which the project's own venv does not have.
"""

from __future__ import annotations

import json
import logging
import struct
import sys
import time
from pathlib import Path

_RECORDED: list = []
"""Shingle arrays returned by the signature stage, in document order (module level: the executor
deep-copies the pipeline, so an attribute of the step would not survive)."""


def main() -> None:
    import numpy as np
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.dedup.minhash import (
        MinhashConfig,
        MinhashDedupBuckets,
        MinhashDedupCluster,
        MinhashDedupFilter,
        MinhashDedupSignature,
    )
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.writers import JsonlWriter
    from datatrove.utils.hashing import HashConfig
    from loguru import logger

    logger.remove()  # datatrove logs every step to stderr; keep the bench output readable
    logging.disable(logging.WARNING)
    source, work = Path(sys.argv[1]), Path(sys.argv[2])
    config = MinhashConfig(
        n_grams=5,
        num_buckets=25,
        hashes_per_bucket=10,
        seed=1,
        hash_config=HashConfig(precision=64, hash_fc="xxhash"),
    )

    class RecordingSignature(MinhashDedupSignature):
        """datatrove's signature step, unchanged, remembering the shingles it hashed."""

        def get_shingles(self, text: str) -> np.ndarray:
            shingles = super().get_shingles(text)
            _RECORDED.append(shingles)
            return shingles

    def reader() -> JsonlReader:
        return JsonlReader(str(source.parent), glob_pattern=source.name, text_key="text", id_key="id")

    stages = {
        "signatures": LocalPipelineExecutor(
            pipeline=[reader(), RecordingSignature(output_folder=str(work / "sigs"), config=config)],
            tasks=1,
            workers=1,
            logging_dir=str(work / "logs/sigs"),
        ),
        "buckets": LocalPipelineExecutor(
            pipeline=[
                MinhashDedupBuckets(
                    input_folder=str(work / "sigs"), output_folder=str(work / "buckets"), config=config
                )
            ],
            tasks=config.num_buckets,
            workers=1,
            logging_dir=str(work / "logs/buckets"),
        ),
        "cluster": LocalPipelineExecutor(
            pipeline=[
                MinhashDedupCluster(
                    input_folder=str(work / "buckets"),
                    output_folder=str(work / "remove"),
                    config=config,
                    save_cluster_id=True,
                )
            ],
            tasks=1,
            workers=1,
            logging_dir=str(work / "logs/cluster"),
        ),
        "filter": LocalPipelineExecutor(
            pipeline=[
                reader(),
                MinhashDedupFilter(input_folder=str(work / "remove")),
                JsonlWriter(str(work / "kept"), compression=None),
            ],
            tasks=1,
            workers=1,
            logging_dir=str(work / "logs/filter"),
        ),
    }
    seconds: dict[str, float] = {}
    start = time.perf_counter()
    for name, executor in stages.items():
        t0 = time.perf_counter()
        executor.run()
        seconds[name] = time.perf_counter() - t0
    total = time.perf_counter() - start

    clusters: list[list[int]] = []
    cluster_file = work / "remove" / "000000.clusters"
    if cluster_file.exists():
        data = cluster_file.read_bytes()
        clusters = [list(pair) for pair in struct.iter_unpack("<2I", data)]
    kept = sum(1 for path in (work / "kept").glob("*.jsonl") for _ in path.open())
    sets = [np.unique(s.reshape(-1)) for s in _RECORDED]
    np.savez(
        work / "shingles.npz",
        values=np.concatenate(sets) if sets else np.empty(0, np.uint64),
        offsets=np.cumsum([0] + [s.size for s in sets]),
    )
    print(json.dumps({"seconds": seconds, "total_s": total, "kept": kept, "clusters": clusters}))


if __name__ == "__main__":  # datatrove's executors spawn processes: the guard is required
    main()
