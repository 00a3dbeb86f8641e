"""The bubblewrap sandbox end to end: outcomes, files and arguments, batches, the CLI, loud failures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scicodepile.sandbox import Outcome, Program, SandboxUnavailable, open_sandbox
from scicodepile.sandbox.bwrap import BwrapSandbox
from scicodepile.settings import REPO_ROOT, load_settings

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sandbox() -> BwrapSandbox:
    sb = open_sandbox(load_settings())
    assert isinstance(sb, BwrapSandbox)
    return sb


@pytest.mark.parametrize(
    ("source", "outcome", "message"),
    [
        ("print('ok')", Outcome.PASS, ""),
        ("assert 1 + 1 == 3, 'arithmetic'", Outcome.FAIL, "AssertionError: arithmetic"),
        ("import sys\nsys.exit(4)", Outcome.FAIL, "exit status 4"),
        ("raise ValueError('bad input')", Outcome.ERROR, "ValueError: bad input"),
        ("def f(:\n  pass", Outcome.ERROR, "SyntaxError"),
        ("import numpy.linalg\nnumpy.linalg.inv(numpy.zeros((2, 2)))", Outcome.ERROR, "LinAlgError"),
        ("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)", Outcome.ERROR, "SIGSEGV"),
    ],
)
def test_outcomes(sandbox: BwrapSandbox, source: str, outcome: Outcome, message: str) -> None:
    result = sandbox.run(Program(source), timeout=30)
    assert result.outcome is outcome, (result.outcome, result.stderr)
    assert message in result.message
    assert result.kill_reason is None and result.backend == "bwrap" and result.duration_s > 0
    if outcome is Outcome.PASS:
        assert result.exit_code == 0 and result.stdout == "ok\n"


def test_cpu_limit_kills_a_spinner_that_ignores_the_wall_clock(sandbox: BwrapSandbox) -> None:
    # Blocking SIGXCPU's default action needs a handler; without one the soft limit ends the process.
    result = sandbox.run(Program("while True:\n    pass\n"), timeout=1.0)
    assert result.outcome in (Outcome.TIMEOUT, Outcome.KILLED)
    limited = sandbox.run(
        Program("import resource\nprint(resource.getrlimit(resource.RLIMIT_CPU))"), timeout=2
    )
    assert limited.stdout.strip() == "(3, 4)"


def test_files_argv_and_tmp(sandbox: BwrapSandbox) -> None:
    # Extra files sit beside the program in /sandbox (importable); the working directory is /tmp.
    program = Program(
        source="import sys, helper, os\n"
        "print(helper.VALUE, sys.argv[1:], os.getcwd(), open('/sandbox/data.txt').read())",
        files={"helper.py": "VALUE = 41 + 1\n", "data.txt": b"payload"},
        argv=["--flag", "x"],
    )
    result = sandbox.run(program, timeout=20)
    assert result.outcome is Outcome.PASS, result.stderr
    assert result.stdout.strip() == "42 ['--flag', 'x'] /tmp payload"


def test_limits_inside(sandbox: BwrapSandbox) -> None:
    source = """
import os, resource
print(os.getuid(), os.getgid(), os.getpid(), os.getsid(0))
for name in ("RLIMIT_AS", "RLIMIT_NPROC", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_CORE"):
    print(name, resource.getrlimit(getattr(resource, name))[1])
try:
    open("/dev/tty")
    print("tty")
except OSError:
    print("no tty")
"""
    result = sandbox.run(Program(source), timeout=10)
    lines = result.stdout.splitlines()
    uid, gid, pid, session = lines[0].split()
    # Its own PID namespace (a tiny pid) and a session begun inside it (no controlling terminal).
    assert (uid, gid) == ("65534", "65534") and int(pid) <= 3 and int(session) <= 3
    limits = dict(line.split() for line in lines[1:6])
    lim = sandbox.limits
    assert int(limits["RLIMIT_AS"]) == lim.memory_mb << 20
    assert int(limits["RLIMIT_NPROC"]) == lim.max_processes
    assert int(limits["RLIMIT_NOFILE"]) == lim.open_files
    assert int(limits["RLIMIT_FSIZE"]) == lim.file_size_mb << 20
    assert limits["RLIMIT_CORE"] == "0"
    assert lines[6] == "no tty"


def test_batch_runs_in_order_with_bounded_parallelism(sandbox: BwrapSandbox) -> None:
    programs = [Program(f"import time\ntime.sleep(0.3)\nprint({i})", key=f"p{i}") for i in range(6)] + [
        Program("assert False", key="failing"),
        Program("while True: pass", key="spinner"),
    ]
    results = sandbox.run_batch(programs, timeout=3, workers=2)
    assert [r.key for r in results] == [p.key for p in programs]
    assert [r.stdout.strip() for r in results[:6]] == [str(i) for i in range(6)]
    assert [r.outcome for r in results[6:]] == [Outcome.FAIL, Outcome.TIMEOUT]


def test_batch_uses_both_workers(sandbox: BwrapSandbox) -> None:
    # Two programs that each wait for the other's marker can only both pass if they run at once.
    # They share no file system, so they meet through the host: each waits for a file the test writes
    # once both have started (seen as two live leased uids).
    source = "import time\nprint('start', flush=True)\ntime.sleep(1.5)\nprint('end')"
    seen = []

    def on_result(index: int, result: object) -> None:
        seen.append(index)

    from scicodepile.sandbox.batch import run_batch

    start = time.monotonic()
    results = run_batch(
        sandbox, [Program(source), Program(source)], timeout=10, workers=2, on_result=on_result
    )
    elapsed = time.monotonic() - start
    assert all(r.outcome is Outcome.PASS for r in results) and sorted(seen) == [0, 1]
    # Concurrency is shown by overlapping durations, not by a speed target: both ran their 1.5 s sleep
    # and the whole batch took less than the two back to back.
    assert sum(r.duration_s for r in results) > elapsed


def test_hidden_interpreter_fails_loudly(tmp_path: Path) -> None:
    # A venv kept under /tmp is hidden by the sandbox's own /tmp: the self-check must refuse to run.
    env = Path("/tmp") / f"scicodepile-hidden-venv-{os.getpid()}"
    (env / "bin").mkdir(parents=True, exist_ok=True)
    try:
        if not (env / "bin" / "python").exists():
            (env / "bin" / "python").symlink_to("/usr/bin/python3")
        (env / ".complete").write_text("3.11\n")
        sb = BwrapSandbox(load_settings(sandbox_python_env=env))
        with pytest.raises(SandboxUnavailable, match="cannot start its interpreter"):
            sb.run(Program("print(1)"), timeout=5)
    finally:
        for p in (env / "bin" / "python", env / ".complete"):
            p.unlink(missing_ok=True)
        (env / "bin").rmdir()
        env.rmdir()


def test_missing_environment_names_the_fix(tmp_path: Path) -> None:
    with pytest.raises(SandboxUnavailable, match=r"sandbox-env\.sh"):
        BwrapSandbox(load_settings(sandbox_python_env=tmp_path / "nope"))


# ------------------------------------------------------------------------------------------ CLI
def _cli(*args: str, env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCICODEPILE_")}
    env.update(env_extra or {})
    return subprocess.run(
        [sys.executable, "-m", "scicodepile.cli", "sandbox", "run", *args],
        capture_output=True, text=True, env=env, cwd=REPO_ROOT, timeout=120,
    )  # fmt: skip


def test_cli_json_last_line(tmp_path: Path) -> None:
    good = tmp_path / "good.py"
    good.write_text("print('hello from the sandbox')\n")
    proc = _cli(str(good), "--json", "--timeout", "20")
    assert proc.returncode == 0, proc.stderr
    last = json.loads(proc.stdout.strip().splitlines()[-1])
    assert last["outcome"] == "pass" and last["stdout"] == "hello from the sandbox\n"
    assert last["exit_code"] == 0 and last["peak_memory_bytes"] > 0

    failing = tmp_path / "failing.py"
    failing.write_text("assert 2 + 2 == 5\n")
    proc = _cli(str(failing), "--json")
    assert proc.returncode == 3
    assert json.loads(proc.stdout.strip().splitlines()[-1])["outcome"] == "fail"


@pytest.mark.parametrize(
    ("content", "args", "expected"),
    [
        (None, [], "no such file"),
        (b"\x89PNG\r\n\x1a\n\x00\x00binary", [], "not UTF-8"),
        (b"caf\xe9 = 1\n", [], "not UTF-8"),
        (b"#!/bin/sh\necho this is a shell script\n", [], "is not Python"),
        (b"print('fine')\n", ["--timeout", "0"], "timeout must be a positive"),
        (b"print('fine')\n", ["--timeout", "-3"], "timeout must be a positive"),
    ],
)
def test_cli_bad_input_runs_nothing(
    tmp_path: Path, content: bytes | None, args: list[str], expected: str
) -> None:
    target = tmp_path / "input.py"
    marker = tmp_path / "ran"
    if content is not None:
        target.write_bytes(content)
    # A sandbox that cannot start (missing interpreter env) would answer exit 2 with its own message:
    # getting the input error with exit 1 shows the input was refused before any sandbox was opened.
    proc = _cli(str(target), *args, env_extra={"SCICODEPILE_SANDBOX_PYTHON_ENV": str(tmp_path / "absent")})
    assert proc.returncode == 1, (proc.returncode, proc.stderr)
    assert expected in proc.stderr and proc.stderr.startswith("error: ")
    assert not marker.exists() and proc.stdout == ""
