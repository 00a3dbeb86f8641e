"""The sandbox-escape suite: hostile programs against the real bubblewrap sandbox.

Each attack is a real program run in the sandbox, followed by checks from the host (a listener that must
see no connection, a secret that must not show up, files that must not appear, processes that must not
survive).  The suite prints ``attacks tried: N, contained: N`` and fails unless every attack was
contained.  Each containment check also asserts the program really ran (its own report line is in its
output), so a sandbox that cannot start its interpreter fails here instead of "containing" everything.
"""

from __future__ import annotations

import json
import os
import platform
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
from scicodepile.sandbox.seccomp import _ARCHES
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


def attack_hijack_init(sb: BwrapSandbox) -> tuple[bool, str]:
    # bwrap's init (pid 1 inside) runs as the program's uid.  Measured before the fix: the program could
    # patch init's code through /proc/1/mem so that init dropped its parent-death signal and paused; the
    # run then outlived its timeout and the runner waited on init forever.  Every route to init's memory
    # must be closed, and the runner must come back on time with nothing left alive.
    numbers = _ARCHES.get(platform.machine(), (0, {}))[1]
    source = f"""
import ctypes, os, time
libc = ctypes.CDLL(None, use_errno=True)
def tried(label, ok):
    print(("OPENED " if ok else "blocked ") + label, flush=True)
try:
    pc = int(open("/proc/1/syscall").read().split()[-1], 16)
    fd = os.open("/proc/1/mem", os.O_RDWR)
    # mov eax,157; mov edi,1; xor esi,esi; syscall (prctl: no parent-death signal); then pause forever
    code = bytes.fromhex("b89d000000bf0100000031f60f05b8220000000f05ebf7")
    tried("/proc/1/mem", os.pwrite(fd, code, pc) == len(code))
except OSError as exc:
    tried("/proc/1/mem " + type(exc).__name__, False)
for name, args in (("ptrace", (16, 1, 0, 0)), ("process_vm_writev", (1, 0, 0, 0, 0, 0))):
    nr = {numbers!r}.get(name)
    if nr is not None:
        tried(name, libc.syscall(nr, *args) == 0)
try:
    tried("pidfd_getfd", libc.syscall({numbers.get("pidfd_getfd", -1)}, os.pidfd_open(1), 0, 0) >= 0)
except OSError as exc:
    tried("pidfd_open " + type(exc).__name__, False)
if os.fork() == 0:  # an orphan whose exit would wake a patched init
    if os.fork() == 0:
        time.sleep(0.1)
        os._exit(0)
    os._exit(0)
os.wait()
time.sleep(3600)
"""
    done: list[RunResult] = []
    thread = threading.Thread(target=lambda: done.append(sb.run(Program(source), timeout=2)), daemon=True)
    start = time.monotonic()
    thread.start()
    thread.join(30)
    if not done:
        return False, f"runner still waiting after {time.monotonic() - start:.0f} s"
    result = done[0]
    survivors = _live_sandbox_processes(sb)
    ok = (
        result.outcome is Outcome.TIMEOUT
        and "OPENED" not in result.stdout
        and result.stdout.count("blocked") >= 2
        and not survivors
    )
    return ok, f"{result.outcome} survivors={survivors} | {result.stdout.strip()}"


def attack_kernel_keyring_and_syscalls(sb: BwrapSandbox) -> tuple[bool, str]:
    # Keys added under the leased host uid outlived the run and showed in the next run's /proc/keys;
    # the rest is kernel attack surface no scientific program needs.
    numbers = _ARCHES.get(platform.machine(), (0, {}))[1]
    marker = "leak" + uuid.uuid4().hex[:8]
    source = f"""
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
numbers = {numbers!r}
r = libc.syscall(numbers["add_key"], b"user", b"{marker}", b"secret", 6, -4)
print("add_key", "ADDED" if r > 0 else "blocked", os.strerror(ctypes.get_errno()), flush=True)
for name in ("keyctl", "request_key", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup"):
    r = libc.syscall(numbers[name], 0, 0, 0, 0, 0)
    err = ctypes.get_errno()
    print(name, "blocked" if r == -1 and err == 1 else f"ALLOWED r={{r}} {{os.strerror(err)}}", flush=True)
"""
    first = sb.run(Program(source), timeout=10)
    second = sb.run(Program("print(open('/proc/keys').read())"), timeout=10)
    ok = (
        first.outcome is Outcome.PASS
        and first.stdout.count("blocked") == 7
        and marker not in second.stdout
        and second.outcome is Outcome.PASS
    )
    return ok, f"{first.stdout.strip()} | keys: {second.stdout.strip()[:120]}"


def attack_inode_exhaustion(sb: BwrapSandbox) -> tuple[bool, str]:
    # Empty files cost no bytes, so a size cap alone let a program pin 1.3 million tmpfs inodes (1.4 GB
    # of kernel memory) in 10 s.  Both writable folders share one inode cap.
    source = """
import os
n = 0
for folder in ("/tmp", "/dev/shm"):
    try:
        while True:
            os.close(os.open(f"{folder}/{n}", os.O_CREAT | os.O_WRONLY, 0o600))
            n += 1
    except OSError as exc:
        print("stopped", folder, n, exc.errno, flush=True)
"""
    result = sb.run(Program(source), timeout=20)
    counts = [int(line.split()[2]) for line in result.stdout.splitlines() if line.startswith("stopped")]
    ok = (
        result.outcome is Outcome.PASS
        and len(counts) == 2
        and 0 < counts[-1] <= sb.limits.tmp_inodes
        and not _live_sandbox_processes(sb)
    )
    return ok, f"{result.outcome} files={counts} cap={sb.limits.tmp_inodes} in {result.duration_s:.2f}s"


def attack_thread_bomb(sb: BwrapSandbox) -> tuple[bool, str]:
    source = """
import threading, time
print("spawning", flush=True)
while True:
    try:
        threading.Thread(target=time.sleep, args=(3600,), daemon=True).start()
    except RuntimeError:
        time.sleep(0.01)
"""
    result = sb.run(Program(source), timeout=2)
    survivors = _live_sandbox_processes(sb)
    ok = (
        result.outcome is Outcome.KILLED
        and result.kill_reason is KillReason.PROCESSES
        and "spawning" in result.stdout
        and not survivors
    )
    return ok, f"{result.outcome} {result.kill_reason} survivors={survivors}"


def attack_stopped_children(sb: BwrapSandbox) -> tuple[bool, str]:
    # Children that stop themselves (SIGSTOP) and ignore SIGTERM, in sessions of their own.
    source = """
import os, signal, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
for _ in range(5):
    if os.fork() == 0:
        os.setsid()
        os.kill(os.getpid(), signal.SIGSTOP)
        time.sleep(3600)
print("stopped children", flush=True)
time.sleep(3600)
"""
    result = sb.run(Program(source), timeout=1.5)
    survivors = _live_sandbox_processes(sb)
    ok = result.outcome is Outcome.TIMEOUT and "stopped children" in result.stdout and not survivors
    return ok, f"{result.outcome} {result.duration_s:.2f}s survivors={survivors}"


def attack_neighbour_sandbox(sb: BwrapSandbox) -> tuple[bool, str]:
    # Two runs at once: the second must not see, signal, or read anything of the first.
    secret = "neighbour-" + uuid.uuid4().hex
    first_src = f"""
import os, socket, time
open("/tmp/secret", "w").write("{secret}")
open("/dev/shm/secret", "w").write("{secret}")
server = socket.socket(socket.AF_UNIX)
server.bind("\\0scicodepile-neighbour")
server.listen()
print("ready", os.getpid(), flush=True)
time.sleep(2.5)
print("first alive", flush=True)
"""
    second_src = """
import os, signal, socket
print("pids", sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), flush=True)
for path in ("/tmp/secret", "/dev/shm/secret"):
    try:
        print("READ", open(path).read())
    except OSError as exc:
        print("blocked", path, type(exc).__name__)
try:
    socket.socket(socket.AF_UNIX).connect("\\0scicodepile-neighbour")
    print("CONNECTED")
except OSError as exc:
    print("blocked socket", type(exc).__name__)
for pid in range(3, 200):
    try:
        os.kill(pid, signal.SIGKILL)
        print("KILLED", pid)
    except OSError:
        pass
"""
    results: dict[str, RunResult] = {}
    first = threading.Thread(
        target=lambda: results.setdefault("first", sb.run(Program(first_src), timeout=10))
    )
    first.start()
    time.sleep(0.8)
    results["second"] = sb.run(Program(second_src), timeout=10)
    first.join(20)
    a, b = results.get("first"), results["second"]
    ok = (
        a is not None
        and a.outcome is Outcome.PASS
        and "first alive" in a.stdout
        and b.outcome is Outcome.PASS
        and "pids [1, 2]" in b.stdout  # its own init and itself: nothing of the first run
        and b.stdout.count("blocked") == 3
        and secret not in b.stdout
        and "KILLED" not in b.stdout
    )
    return ok, f"first={a and a.outcome} second: {b.stdout.strip()[:200]}"


def attack_binary_output(sb: BwrapSandbox) -> tuple[bool, str]:
    # Binary garbage and invalid UTF-8 on both streams, and output exactly at the cap: a valid result.
    cap = sb.limits.max_output_bytes
    garbage = (
        "import os\nos.write(1, bytes(range(256)) * 4 + b'\\xff\\xfe\\xc0')\nos.write(2, b'\\x00\\xff')\n"
    )
    result = sb.run(Program(garbage), timeout=10)
    exact = f"import os\nv = memoryview(b'y' * {cap})\nwhile v:\n    v = v[os.write(1, v):]\n"
    at_cap = sb.run(Program(exact), timeout=20)
    over = sb.run(Program(exact.replace(f"{cap}", f"{cap + 1}")), timeout=20)
    json.dumps([result.to_dict(), at_cap.to_dict(), over.to_dict()])
    ok = (
        result.outcome is Outcome.PASS
        and "\ufffd" in result.stdout
        and at_cap.outcome is Outcome.PASS
        and at_cap.output_bytes == cap
        and over.outcome is Outcome.KILLED
        and over.kill_reason is KillReason.OUTPUT
    )
    return ok, f"garbage={result.outcome} at_cap={at_cap.outcome} over={over.outcome}/{over.kill_reason}"


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
    Attack("hijacking the namespace's init", attack_hijack_init),
    Attack("kernel keyring and attack-surface syscalls", attack_kernel_keyring_and_syscalls),
    Attack("inode exhaustion", attack_inode_exhaustion),
    Attack("thread bomb", attack_thread_bomb),
    Attack("stopped children ignoring SIGTERM", attack_stopped_children),
    Attack("a neighbour sandbox running at once", attack_neighbour_sandbox),
    Attack("binary output and output at the cap", attack_binary_output),
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
