"""Archive -> F1 shard throughput of the curate stage's extraction path, per core.

Input: a tar.gz of real code (the Python standard library of this interpreter, capped at
``BENCH_EXTRACT_MB`` uncompressed), built once.  ours = MB (uncompressed) per second on one core for
safe extraction (every member checked, caps), language detection, decoding, vendored/generated
skipping, The Stack file filters, secret redaction, exact hashing and writing the F1 Parquet shard.
peer = the same archive through plain ``tarfile.extractall`` + reading and decoding every file +
writing the same Parquet columns, with no checks, in the same run.  Both run in this one process.
"""

from __future__ import annotations

import os
import shutil
import sysconfig
import tarfile
import tempfile
import time
from pathlib import Path

from _common import emit
from scicodepile.curate.dedup import content_sha256
from scicodepile.curate.extract import extract_code, load_language_table, parse_languages
from scicodepile.curate.fetch import ExtractionLimits, extract_archive
from scicodepile.curate.filters.files import StackFileFilter
from scicodepile.curate.redact import redact
from scicodepile.store.base import LocalObjectStore
from scicodepile.store.parquet import write_shard

CAP_MB = float(os.environ.get("BENCH_EXTRACT_MB", "40"))
ROUNDS = int(os.environ.get("BENCH_EXTRACT_ROUNDS", "2"))


def build_archive(out: Path) -> int:
    """A tar.gz of stdlib files up to CAP_MB; returns the uncompressed bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    with tarfile.open(out, "w:gz", compresslevel=6) as tf:
        for path in sorted(root.rglob("*")):
            skip = {"site-packages", "__pycache__"} & set(path.parts)
            if skip or path.suffix == ".pyc" or path.is_symlink() or not path.is_file():
                continue
            size = path.stat().st_size
            if total + size > CAP_MB * 1e6:
                continue
            tf.add(path, arcname=f"stdlib/{path.relative_to(root)}", recursive=False)
            total += size
    return total


def ours(archive: Path, work: Path, store: LocalObjectStore) -> int:
    langs = parse_languages("Python,C,C++,Fortran,Julia,R,MATLAB,Rust,Cython,CUDA")
    table = load_language_table()
    result = extract_archive(archive, "tar.gz", work / "tree", ExtractionLimits(max_file_bytes=8_000_000))
    rows = []
    filt = StackFileFilter()
    for f in extract_code(result.root, result.files, langs, 1_000_000, table):
        if f.kept and filt.filter(f).keep:
            text, _ = redact(f.text or "")
            rows.append(
                {
                    "content": text,
                    "repository": "bench/stdlib",
                    "commit": "bench",
                    "path": f.path,
                    "language": f.language,
                    "license": "PSF-2.0",
                    "sha256": content_sha256(text),
                    "size": len(text.encode("utf-8", "surrogatepass")),
                    "domain": None,
                    "dedup_cluster": None,
                }
            )
    write_shard(store, "f1/bench/part-00000.parquet", rows)
    return len(rows)


def peer(archive: Path, work: Path, store: LocalObjectStore) -> int:
    dest = work / "plain"
    with tarfile.open(archive, "r:gz") as tf:
        tf.extractall(dest, filter="fully_trusted")
    rows = []
    for path in dest.rglob("*"):
        if path.is_file():
            text = path.read_bytes().decode("utf-8", "replace")
            rows.append(
                {
                    "content": text,
                    "repository": "bench/stdlib",
                    "commit": "bench",
                    "path": str(path.relative_to(dest)),
                    "size": len(text),
                }
            )
    write_shard(store, "f1/bench-peer/part-00000.parquet", rows)
    return len(rows)


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        archive = tmp / "stdlib.tar.gz"
        total = build_archive(archive)
        store = LocalObjectStore(tmp / "store")
        best = {"ours": 0.0, "peer": 0.0}
        kept = 0
        for _ in range(ROUNDS):
            for name, fn in (("peer", peer), ("ours", ours)):
                work = tmp / f"work-{name}"
                start = time.perf_counter()
                n = fn(archive, work, store)
                elapsed = time.perf_counter() - start
                best[name] = max(best[name], total / 1e6 / elapsed)
                kept = n if name == "ours" else kept
                shutil.rmtree(work, ignore_errors=True)
        emit(
            "extract",
            "mb_per_s_per_core",
            best["ours"],
            best["peer"],
            "tarfile.extractall + read + parquet (no checks)",
            input_mb=round(total / 1e6, 1),
            archive_mb=round(archive.stat().st_size / 1e6, 1),
            files_kept=kept,
            cores=1,
        )


if __name__ == "__main__":
    main()
