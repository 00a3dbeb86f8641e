"""Object-store put/get throughput on both backends (local folder and a real S3 server).

ours = MB/s of our ObjectStore on the S3 backend (put then get, key validation, connection reuse);
peer = MB/s of the bare ``minio`` client doing the same work in the same run.  The local backend's
figures (atomic, fsynced writes) and its peer (plain, non-atomic file writes) ride in the same line
as ``local_ours`` / ``local_peer``.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from _common import emit
from scicodepile.settings import load_settings
from scicodepile.store import open_store
from tests.support.services import seaweedfs_s3

N_OBJECTS = int(os.environ.get("BENCH_STORE_OBJECTS", "40"))
SIZE = int(os.environ.get("BENCH_STORE_SIZE", str(1 << 20)))


def _ours(store, payloads: list[bytes]) -> float:
    start = time.perf_counter()
    for i, data in enumerate(payloads):
        store.put_bytes(f"bench/obj-{i:05d}", data)
    for i in range(len(payloads)):
        store.get_bytes(f"bench/obj-{i:05d}")
    return 2 * len(payloads) * SIZE / (time.perf_counter() - start) / 1e6


def _peer_local(root: Path, payloads: list[bytes]) -> float:
    start = time.perf_counter()
    for i, data in enumerate(payloads):
        (root / f"obj-{i:05d}").write_bytes(data)
    for i in range(len(payloads)):
        (root / f"obj-{i:05d}").read_bytes()
    return 2 * len(payloads) * SIZE / (time.perf_counter() - start) / 1e6


def _peer_s3(client, bucket: str, payloads: list[bytes]) -> float:
    import io

    start = time.perf_counter()
    for i, data in enumerate(payloads):
        client.put_object(bucket, f"raw/obj-{i:05d}", io.BytesIO(data), len(data))
    for i in range(len(payloads)):
        r = client.get_object(bucket, f"raw/obj-{i:05d}")
        r.read()
        r.close()
        r.release_conn()
    return 2 * len(payloads) * SIZE / (time.perf_counter() - start) / 1e6


def main() -> None:
    payloads = [os.urandom(SIZE) for _ in range(N_OBJECTS)]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        local = open_store(load_settings(var_dir=tmp / "var"))
        (tmp / "raw").mkdir()
        local_peer = _peer_local(tmp / "raw", payloads)
        local_ours = _ours(local, payloads)
        with seaweedfs_s3(tmp / "weed") as server:
            settings = load_settings(
                var_dir=tmp / "var",
                store_backend="s3",
                s3_endpoint=server.endpoint,
                s3_bucket="bench-store",
                s3_create_bucket=True,
            )
            s3 = open_store(settings)
            peer = _peer_s3(s3.client, "bench-store", payloads)
            ours = _ours(s3, payloads)
            emit(
                "store",
                "put_get_mb_per_s",
                ours,
                peer,
                "bare minio client (S3, SeaweedFS)",
                objects=N_OBJECTS,
                object_bytes=SIZE,
                local_ours=round(local_ours, 1),
                local_peer=round(local_peer, 1),
                local_peer_name="plain non-atomic file writes",
            )


if __name__ == "__main__":
    main()
