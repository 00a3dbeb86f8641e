"""The Docker backend, for deployments with a Docker engine (``SCICODEPILE_SANDBOX_BACKEND=docker``).

One container per program from ``sandbox_docker_image`` (Python 3.11 with the pins of
``include/data/sandbox-requirements.txt``; the ``python`` on its PATH is the sandbox interpreter):
no network (``network_mode=none``), read-only root, a size-capped tmpfs ``/tmp``, user 65534, every
capability dropped, ``no-new-privileges``, pids and memory limits from the engine's cgroups, the same
rlimits as the bwrap backend, an init process (``--init``) so zombies are reaped, and a fresh
environment.  The program and its files are bind-mounted read-only from a host temporary folder, so the
engine must run on this host (the usual worker layout).  On timeout the container is killed and removed,
which ends every process in it.  Output is streamed with the same cap as bwrap; ``peak_memory_bytes`` is
the cgroup's peak when the engine reports it.
"""

# ruff: noqa: S108 - /tmp and /dev/shm here are paths inside the sandbox (its own tmpfs), not the host's.

from __future__ import annotations

import contextlib
import math
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scicodepile.sandbox.base import (
    KillReason,
    Limits,
    Outcome,
    Program,
    RunResult,
    Sandbox,
    SandboxUnavailable,
    TailBuffer,
    classify,
)

if TYPE_CHECKING:
    from scicodepile.settings import Settings

_MiB = 1 << 20


def docker_client() -> Any:
    """A client for the engine named by ``DOCKER_HOST`` (or the local socket), or SandboxUnavailable."""
    try:
        import docker
    except ImportError:  # pragma: no cover - docker is in requirements.txt
        raise SandboxUnavailable(
            "the docker SDK is not installed", setting="SCICODEPILE_SANDBOX_BACKEND"
        ) from None
    try:
        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # the SDK raises DockerException, requests errors, FileNotFoundError...
        raise SandboxUnavailable(
            f"no Docker engine reachable ({type(exc).__name__}: {str(exc)[:200]})",
            setting="SCICODEPILE_SANDBOX_BACKEND",
        ) from None
    return client


class DockerSandbox(Sandbox):
    """Runs each program in a fresh, locked-down container."""

    name = "docker"

    def __init__(self, settings: Settings, limits: Limits | None = None, client: Any = None) -> None:
        super().__init__(settings, limits)
        self.client = client or docker_client()
        self.image = settings.sandbox_docker_image
        try:
            self.client.images.get(self.image)
        except Exception:
            raise SandboxUnavailable(
                f"docker image {self.image} is not present on the engine (build or pull it first)",
                setting="SCICODEPILE_SANDBOX_DOCKER_IMAGE",
            ) from None

    def _container_kwargs(self, folder: str, program: Program, timeout: float) -> dict[str, Any]:
        from docker.types import Ulimit

        lim = self.limits
        cpu = math.ceil(timeout) + 1
        return {
            "image": self.image,
            "command": ["python", "-E", "-s", "-B", f"/sandbox/{program.name}", *program.argv],
            "detach": True,
            "network_mode": "none",
            "read_only": True,
            "tmpfs": {
                "/tmp": f"size={lim.tmp_mb}m,nr_inodes={lim.tmp_inodes},mode=1777",
                "/dev/shm": f"size=16m,nr_inodes={min(lim.tmp_inodes, 1024)}",
            },
            "volumes": {folder: {"bind": "/sandbox", "mode": "ro"}},
            "working_dir": "/tmp",
            "user": "65534:65534",
            "cap_drop": ["ALL"],
            "security_opt": ["no-new-privileges"],
            "init": True,
            "pids_limit": lim.max_processes,
            "mem_limit": f"{lim.memory_mb}m",
            "memswap_limit": f"{lim.memory_mb}m",
            "ulimits": [
                Ulimit(name="cpu", soft=cpu, hard=cpu + 1),
                Ulimit(name="fsize", soft=lim.file_size_mb * _MiB, hard=lim.file_size_mb * _MiB),
                Ulimit(name="nofile", soft=lim.open_files, hard=lim.open_files),
                Ulimit(name="core", soft=0, hard=0),
            ],
            "environment": {
                "HOME": "/tmp", "TMPDIR": "/tmp", "LANG": "C.UTF-8", "OPENBLAS_NUM_THREADS": "1",
                "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "MPLBACKEND": "Agg",
            },
            "hostname": "sandbox",
            "labels": {"scicodepile.sandbox": "1"},
        }  # fmt: skip

    def run(self, program: Program, *, timeout: float | None = None) -> RunResult:
        """Run ``program`` in a new container and remove it afterwards, whatever happened."""
        seconds = self.check_timeout(timeout)
        lim = self.limits
        out, err = TailBuffer(lim.tail_bytes), TailBuffer(lim.tail_bytes)
        with tempfile.TemporaryDirectory(prefix="scicodepile-docker-") as folder:
            Path(folder).chmod(0o755)
            for name, data in program.payload().items():
                path = Path(folder) / name
                path.write_bytes(data)
                path.chmod(0o644)
            container = self.client.containers.create(**self._container_kwargs(folder, program, seconds))
            flooded = threading.Event()
            try:
                stream = container.attach(stdout=True, stderr=True, stream=True, demux=True, logs=True)
                start = time.monotonic()
                container.start()

                def pump() -> None:
                    for chunk_out, chunk_err in stream:
                        if chunk_out:
                            out.write(chunk_out)
                        if chunk_err:
                            err.write(chunk_err)
                        if out.total + err.total > lim.max_output_bytes:
                            flooded.set()
                            with contextlib.suppress(Exception):
                                container.kill()
                            return

                reader = threading.Thread(target=pump, daemon=True)
                reader.start()
                timed_out = False
                try:
                    status = container.wait(timeout=seconds)
                except Exception:  # requests' ReadTimeout or ConnectionError: the wall clock ran out
                    timed_out = True
                    with contextlib.suppress(Exception):
                        container.kill()
                    status = container.wait(timeout=30)
                duration = time.monotonic() - start
                reader.join(timeout=5)
                peak = self._peak_memory(container)
            finally:
                with contextlib.suppress(Exception):
                    container.remove(force=True)
        code = int(status.get("StatusCode", -1))
        stderr = err.text()
        sig = code - 128 if code > 128 else None
        kill_reason: KillReason | None = None
        if flooded.is_set():
            outcome, kill_reason, message = Outcome.KILLED, KillReason.OUTPUT, "output over the cap"
        elif timed_out:
            outcome, message = Outcome.TIMEOUT, "wall-clock timeout"
        elif code == 137:  # the engine's OOM kill (memory cgroup) shows as SIGKILL
            outcome, kill_reason = Outcome.KILLED, KillReason.MEMORY
            message = "killed by SIGKILL (memory limit)"
        else:
            outcome, kill_reason, message = classify(code, sig, stderr)
        return RunResult(
            outcome=outcome,
            kill_reason=kill_reason,
            exit_code=code,
            signal=sig,
            duration_s=duration,
            peak_memory_bytes=peak,
            stdout=out.text(),
            stderr=stderr,
            output_bytes=out.total + err.total,
            truncated=out.truncated or err.truncated,
            backend=self.name,
            message=message,
            key=program.key,
        )

    @staticmethod
    def _peak_memory(container: Any) -> int | None:
        with contextlib.suppress(Exception):
            stats = container.stats(stream=False)
            return int(stats["memory_stats"].get("max_usage") or 0) or None
        return None
