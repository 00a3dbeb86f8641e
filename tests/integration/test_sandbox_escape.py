"""The sandbox-escape suite: hostile programs against the real bubblewrap sandbox.

Each attack is a real program run in the sandbox, followed by checks from the host (a listener that must
see no connection, a secret that must not show up, files that must not appear, processes that must not
survive).  The suite prints ``attacks tried: N, contained: N`` and fails unless every attack was
contained.  Each containment check also asserts the program really ran (its own report line is in its
output), so a sandbox that cannot start its interpreter fails here instead of "containing" everything.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scicodepile.sandbox import KillReason, Outcome, Program, RunResult
from scicodepile.sandbox.bwrap import BwrapSandbox, processes_of
from scicodepile.settings import REPO_ROOT, load_settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox() -> BwrapSandbox:
    return BwrapSandbox(load_settings())


def _live_sandbox_processes(sandbox: BwrapSandbox) -> list[int]:
    """Non-zombie processes owned by any uid the sandbox leases (seen from the host)."""
    base, slots = sandbox.uids.base, sandbox.uids.slots
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            uid = entry.stat().st_uid
            if base <= uid < base + slots:
                found.extend(processes_of(uid, zombies=False))
        except FileNotFoundError:
            continue
    return sorted(set(found))


@dataclass
class Attack:
    name: str
    run: Callable[[BwrapSandbox], tuple[bool, str]]  # (contained, evidence)


# ----------------------------------------------------------------------------------- attacks
def attack_host_loopback(sb: BwrapSandbox) -> tuple[bool, str]:
    accepted: list[tuple] = []
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)
    port = server.getsockname()[1]
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, addr = server.accept()
            except (TimeoutError, OSError):
                continue
            accepted.append(addr)
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        # Sanity: the listener is reachable from the host, so a refusal inside means isolation.
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        time.sleep(0.3)
        host_hits = len(accepted)
        source = f"""
import socket
for host in ("127.0.0.1", "localhost", "::1"):
    try:
        socket.create_connection((host, {port}), timeout=2).close()
        print("CONNECTED", host)
    except OSError as exc:
        print("blocked", host, type(exc).__name__)
"""
        result = sb.run(Program(source), timeout=10)
        time.sleep(0.3)
    finally:
        stop.set()
        thread.join()
        server.close()
    ok = host_hits == 1 and len(accepted) == 1 and "CONNECTED" not in result.stdout
    return ok and result.stdout.count("blocked") == 3, result.stdout


def attack_outside_network(sb: BwrapSandbox) -> tuple[bool, str]:
    source = """
import socket
for target in (("1.1.1.1", 53), ("8.8.8.8", 443), ("10.0.0.1", 80)):
    try:
        socket.create_connection(target, timeout=2).close()
        print("CONNECTED", target)
    except OSError as exc:
        print("blocked", target, type(exc).__name__)
try:
    print("RESOLVED", socket.gethostbyname("pypi.org"))
except OSError as exc:
    print("blocked dns", type(exc).__name__)
import os
print("interfaces", sorted(os.listdir("/sys/class/net")) if os.path.exists("/sys/class/net") else "none")
"""
    result = sb.run(Program(source), timeout=15)
    ok = (
        result.stdout.count("blocked") == 4
        and "CONNECTED" not in result.stdout
        and "RESOLVED" not in result.stdout
    )
    return ok, result.stdout


def attack_host_environment(sb: BwrapSandbox) -> tuple[bool, str]:
    secret = "fake-secret-" + uuid.uuid4().hex
    os.environ["SCICODEPILE_TEST_FAKE_TOKEN"] = secret
    os.environ["AWS_SECRET_ACCESS_KEY"] = secret
    try:
        source = """
import os
print("env", dict(os.environ))
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            print(pid, open(f"/proc/{pid}/environ", "rb").read())
            print(pid, open(f"/proc/{pid}/cmdline", "rb").read())
        except OSError as exc:
            print(pid, "unreadable", exc)
print("done")
"""
        result = sb.run(Program(source), timeout=10)
    finally:
        del os.environ["SCICODEPILE_TEST_FAKE_TOKEN"]
        del os.environ["AWS_SECRET_ACCESS_KEY"]
    ok = "done" in result.stdout and secret not in result.stdout + result.stderr
    ok = ok and "SCICODEPILE" not in result.stdout and "PYTEST" not in result.stdout
    return ok, result.stdout[-400:]


def attack_read_host_files(sb: BwrapSandbox) -> tuple[bool, str]:
    secret = "var-secret-" + uuid.uuid4().hex
    var_dir = REPO_ROOT / "var"
    var_dir.mkdir(exist_ok=True)
    probe = var_dir / f"sandbox-escape-probe-{uuid.uuid4().hex[:8]}.txt"
    probe.write_text(secret)
    probe.chmod(0o644)  # world-readable on the host: only the mount layout can hide it
    targets = [
        str(probe),
        "/etc/shadow",
        "/etc/passwd",
        "/root/.bashrc",
        "/root",
        str(REPO_ROOT / "include" / "scicodepile" / "settings.py"),
        "/home",
        str(Path.home()),
    ]
    try:
        source = f"""
import os
for path in {targets!r}:
    try:
        if os.path.isdir(path):
            print("LISTED", path, os.listdir(path)[:5])
        else:
            print("READ", path, open(path).read()[:200])
    except OSError as exc:
        print("blocked", path, type(exc).__name__)
"""
        result = sb.run(Program(source), timeout=10)
    finally:
        probe.unlink()
    ok = secret not in result.stdout and "READ" not in result.stdout and "LISTED" not in result.stdout
    return ok and result.stdout.count("blocked") == len(targets), result.stdout


def attack_write_outside_tmp(sb: BwrapSandbox) -> tuple[bool, str]:
    name = f"escape-{uuid.uuid4().hex[:8]}"
    env_dir = str(sb.env_dir)
    targets = [
        f"/{name}",
        f"/usr/{name}",
        f"/sandbox/{name}",
        f"/dev/{name}",
        f"{env_dir}/{name}",
        f"/proc/{name}",
        f"/opt/{name}",
    ]
    source = f"""
import os
for path in {targets!r}:
    try:
        with open(path, "w") as fh:
            fh.write("x")
        print("WROTE", path)
    except OSError as exc:
        print("blocked", path, type(exc).__name__)
open("/tmp/ok.txt", "w").write("tmp is writable")
print("tmp", open("/tmp/ok.txt").read())
"""
    result = sb.run(Program(source), timeout=10)
    on_host = [
        p for p in ("/" + name, f"/usr/{name}", f"{env_dir}/{name}", f"/opt/{name}") if os.path.exists(p)
    ]
    ok = "WROTE" not in result.stdout and not on_host and "tmp is writable" in result.stdout
    return ok and result.stdout.count("blocked") == len(targets), result.stdout


def attack_fork_bomb(sb: BwrapSandbox) -> tuple[bool, str]:
    source = """
import os, time
print("forking", flush=True)
while True:
    try:
        os.fork()
    except OSError:
        time.sleep(0.01)
"""
    result = sb.run(Program(source), timeout=3)
    survivors = _live_sandbox_processes(sb)
    ok = (
        result.outcome is Outcome.KILLED
        and result.kill_reason is KillReason.PROCESSES
        and "forking" in result.stdout
        and not survivors
    )
    return ok, f"{result.outcome} {result.kill_reason} survivors={survivors}"


def attack_memory_hog(sb: BwrapSandbox) -> tuple[bool, str]:
    source = """
print("allocating", flush=True)
chunks = []
while True:
    chunks.append(b"x" * (64 << 20))  # written, so resident: not just address space
"""
    result = sb.run(Program(source), timeout=20)
    limit = sb.limits.memory_mb << 20
    ok = (
        result.outcome is Outcome.KILLED
        and result.kill_reason is KillReason.MEMORY
        and "allocating" in result.stdout
        and 256 << 20 < (result.peak_memory_bytes or 0) <= limit
    )
    return ok, f"{result.outcome} {result.kill_reason} peak={result.peak_memory_bytes} {result.message}"


def attack_disk_filler(sb: BwrapSandbox) -> tuple[bool, str]:
    source = """
import os
print("filling", flush=True)
written = 0
i = 0
block = b"x" * (1 << 20)
try:
    while True:
        with open(f"/tmp/fill-{i}", "wb") as fh:
            for _ in range(16):
                fh.write(block)
                fh.flush()
                written += len(block)
        i += 1
finally:
    print("written", written, flush=True)
"""
    result = sb.run(Program(source), timeout=20)
    written = int(result.stdout.split("written")[-1].split()[0]) if "written" in result.stdout else -1
    cap = sb.limits.tmp_mb << 20
    ok = result.outcome is Outcome.KILLED and result.kill_reason is KillReason.DISK and 0 < written <= cap
    return ok, f"{result.outcome} {result.kill_reason} written={written} cap={cap} {result.message}"


def attack_infinite_loop(sb: BwrapSandbox) -> tuple[bool, str]:
    result = sb.run(Program("print('spinning', flush=True)\nwhile True:\n    pass\n"), timeout=1.5)
    ok = result.outcome is Outcome.TIMEOUT and "spinning" in result.stdout and result.duration_s < 6
    return ok and not _live_sandbox_processes(sb), f"{result.outcome} {result.duration_s:.2f}s"


def attack_daemon(sb: BwrapSandbox) -> tuple[bool, str]:
    # Double fork + setsid + closed stdio: a classic daemon.  It then keeps running; the main program
    # either exits at once (pass) or sleeps past the timeout.  From the host, no process of any sandbox
    # uid may be alive afterwards.
    daemon = """
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        for fd in (0, 1, 2):
            os.close(fd)
        while True:
            time.sleep(0.05)
    os._exit(0)
print("daemonized", flush=True)
time.sleep(0.5)
"""
    quick = sb.run(Program(daemon), timeout=5)
    after_quick = _live_sandbox_processes(sb)
    slow = sb.run(Program(daemon + "time.sleep(60)\n"), timeout=1.5)
    after_slow = _live_sandbox_processes(sb)
    ok = (
        quick.outcome is Outcome.PASS
        and "daemonized" in quick.stdout
        and not after_quick
        and slow.outcome is Outcome.TIMEOUT
        and not after_slow
    )
    return ok, f"quick={quick.outcome} survivors={after_quick}; slow={slow.outcome} survivors={after_slow}"


def attack_stdout_flood(sb: BwrapSandbox) -> tuple[bool, str]:
    source = "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n"
    result = sb.run(Program(source), timeout=30)
    ok = (
        result.outcome is Outcome.KILLED
        and result.kill_reason is KillReason.OUTPUT
        and len(result.stdout) <= sb.limits.tail_bytes
        and result.duration_s < 20
    )
    return ok, f"{result.outcome} {result.kill_reason} kept={len(result.stdout)} in {result.duration_s:.2f}s"


def attack_kill_parent(sb: BwrapSandbox) -> tuple[bool, str]:
    host_pid = os.getpid()
    source = f"""
import os, signal
print("ppid", os.getppid(), flush=True)
for target in (os.getppid(), 1, {host_pid}, {os.getppid()}):
    try:
        os.kill(target, signal.SIGKILL)
        print("signalled", target, flush=True)
    except OSError as exc:
        print("blocked", target, type(exc).__name__, flush=True)
try:
    os.kill(-1, signal.SIGKILL)  # everything it may signal: in its own namespace, only itself
except OSError as exc:
    print("blocked -1", exc)
"""
    result = sb.run(Program(source), timeout=10)
    # We are alive (we are running this line); the sandbox still works afterwards.
    again = sb.run(Program("print('still here')"), timeout=10)
    ok = "ppid" in result.stdout and again.outcome is Outcome.PASS and "still here" in again.stdout
    return ok, f"{result.outcome} {result.message} | {result.stdout.strip()[-200:]}"


ATTACKS = [
    Attack("network: host loopback", attack_host_loopback),
    Attack("network: outside", attack_outside_network),
    Attack("host environment variables", attack_host_environment),
    Attack("host files outside the bound paths", attack_read_host_files),
    Attack("write outside tmp", attack_write_outside_tmp),
    Attack("fork bomb", attack_fork_bomb),
    Attack("memory hog", attack_memory_hog),
    Attack("disk filler", attack_disk_filler),
    Attack("infinite loop", attack_infinite_loop),
    Attack("daemon outliving the timeout", attack_daemon),
    Attack("stdout flood", attack_stdout_flood),
    Attack("killing the parent", attack_kill_parent),
]


@pytest.fixture
def report(capsys: pytest.CaptureFixture) -> Iterator[list[str]]:
    lines: list[str] = []
    yield lines
    with capsys.disabled():
        sys.stderr.write("\n" + "\n".join(lines) + "\n")


def test_escape_suite(sandbox: BwrapSandbox, report: list[str]) -> None:
    results: dict[str, tuple[bool, str]] = {}
    for attack in ATTACKS:
        try:
            results[attack.name] = attack.run(sandbox)
        except Exception as exc:  # an attack that breaks the runner is not contained
            results[attack.name] = (False, f"runner raised {type(exc).__name__}: {exc}")
    contained = sum(ok for ok, _ in results.values())
    for name, (ok, evidence) in results.items():
        report.append(
            f"  {'contained' if ok else 'ESCAPED  '}  {name}: {evidence[:160]!s}".replace("\n", " | ")
        )
    report.append(f"attacks tried: {len(ATTACKS)}, contained: {contained}")
    failed = {name: evidence for name, (ok, evidence) in results.items() if not ok}
    assert not failed, failed
    assert not _live_sandbox_processes(sandbox)


def test_result_reports_what_the_program_did(sandbox: BwrapSandbox) -> None:
    """Interpreter visible, scientific stack importable, uid unprivileged: checked on real output."""
    source = "import os, sys, numpy, scipy, sympy, pandas\nprint('uid', os.getuid(), numpy.__version__)\n"
    result: RunResult = sandbox.run(Program(source), timeout=60)
    assert result.outcome is Outcome.PASS, result.stderr
    assert result.exit_code == 0 and result.stdout.startswith("uid 65534 ")
    assert result.peak_memory_bytes and result.peak_memory_bytes > 10 << 20
