"""The sandbox's pure parts: outcome classification, input validation, output tails, uid leases."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest

from scicodepile.sandbox import KillReason, Outcome, Program, SandboxInputError, load_program
from scicodepile.sandbox.base import (
    Limits,
    RunResult,
    TailBuffer,
    classify,
    last_exception,
    requirements_hash,
    sandbox_env_dir,
    validate_timeout,
)
from scicodepile.sandbox.bwrap import UidPool
from scicodepile.settings import load_settings

TRACEBACK = 'Traceback (most recent call last):\n  File "/sandbox/main.py", line 3, in <module>\n    f()\n'


@pytest.mark.parametrize(
    ("exit_code", "signal", "stderr", "expected"),
    [
        (0, None, "", (Outcome.PASS, None)),
        (0, None, TRACEBACK + "ValueError: printed but exited 0", (Outcome.PASS, None)),
        (1, None, TRACEBACK + "AssertionError: expected 3", (Outcome.FAIL, None)),
        (1, None, TRACEBACK + "AssertionError", (Outcome.FAIL, None)),
        (2, None, "usage: nothing", (Outcome.FAIL, None)),
        (1, None, TRACEBACK + "ZeroDivisionError: division by zero", (Outcome.ERROR, None)),
        (
            1,
            None,
            '  File "/sandbox/main.py", line 1\n    def f(:\n          ^\nSyntaxError: invalid syntax',
            (Outcome.ERROR, None),
        ),
        (1, None, TRACEBACK + "MemoryError", (Outcome.KILLED, KillReason.MEMORY)),
        (
            1,
            None,
            TRACEBACK + "numpy.core._exceptions._ArrayMemoryError: Unable to allocate 8.00 GiB",
            (Outcome.KILLED, KillReason.MEMORY),
        ),
        (
            1,
            None,
            TRACEBACK + "OSError: [Errno 28] No space left on device",
            (Outcome.KILLED, KillReason.DISK),
        ),
        (
            1,
            None,
            TRACEBACK + "BlockingIOError: [Errno 11] Resource temporarily unavailable",
            (Outcome.KILLED, KillReason.PROCESSES),
        ),
        (1, None, TRACEBACK + "RuntimeError: can't start new thread", (Outcome.KILLED, KillReason.PROCESSES)),
        (152, 24, "", (Outcome.KILLED, KillReason.CPU)),
        (153, 25, "", (Outcome.KILLED, KillReason.DISK)),
        (139, 11, "", (Outcome.ERROR, None)),
    ],
)
def test_classify(exit_code: int, signal: int | None, stderr: str, expected: tuple) -> None:
    outcome, reason, message = classify(exit_code, signal, stderr)
    assert (outcome, reason) == expected
    if outcome is not Outcome.PASS:
        assert message


def test_last_exception_ignores_text_after_a_traceback_line() -> None:
    assert last_exception(TRACEBACK + "KeyError: 'x'\n") == ("KeyError", "'x'")
    assert last_exception("no traceback here") is None


def test_tail_buffer_keeps_the_tail_and_counts_everything() -> None:
    buf = TailBuffer(10)
    for _ in range(1000):
        buf.write(b"0123456789abcdef")
    assert buf.total == 16000 and buf.truncated and buf.text() == "6789abcdef"
    assert len(buf._buf) <= 20
    small = TailBuffer(100)
    small.write("é".encode()[:1])  # a torn UTF-8 sequence is replaced, not raised
    assert small.text() == "\ufffd" and not small.truncated


@pytest.mark.parametrize("bad", [0, -1, "0", "abc", None, math.nan, math.inf, -0.0])
def test_validate_timeout_rejects(bad: object) -> None:
    with pytest.raises(SandboxInputError, match="timeout"):
        validate_timeout(bad)


def test_validate_timeout_accepts_strings_like_settings_do() -> None:
    assert validate_timeout("2.5") == 2.5 and validate_timeout(1) == 1.0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe\x00binary", "not UTF-8"),
        (b"x = 'caf\xe9'\n", "not UTF-8"),
        (b"SELECT * FROM users;\n", "is not Python"),
        (b"print('a')\x00\n", "NUL"),
        (b"x = (" * 300 + b"1" + b")" * 300, "not Python"),
    ],
)
def test_load_program_rejects_bad_input(tmp_path: Path, content: bytes, message: str) -> None:
    target = tmp_path / "prog.py"
    target.write_bytes(content)
    with pytest.raises(SandboxInputError, match=message):
        load_program(target)


def test_load_program_missing_and_directory(tmp_path: Path) -> None:
    with pytest.raises(SandboxInputError, match="no such file"):
        load_program(tmp_path / "absent.py")
    with pytest.raises(SandboxInputError, match="not a regular file"):
        load_program(tmp_path)


def test_load_program_accepts_python(tmp_path: Path) -> None:
    target = tmp_path / "ok.py"
    target.write_text("import math\nprint(math.pi)\n")
    program = load_program(target)
    assert program.source.startswith("import math") and program.key == str(target)


@pytest.mark.parametrize("name", ["../escape.py", "a/b.py", ".hidden", "", "x" * 200])
def test_program_rejects_unsafe_file_names(name: str) -> None:
    with pytest.raises(SandboxInputError, match="bad file name"):
        Program("print(1)", files={name: b""})


def test_program_payload_and_shadowing() -> None:
    program = Program("print(1)", files={"data.csv": "a,b\n", "blob.bin": b"\x00\x01"})
    assert program.payload() == {"main.py": b"print(1)", "data.csv": b"a,b\n", "blob.bin": b"\x00\x01"}
    with pytest.raises(SandboxInputError, match="hide the program"):
        Program("print(1)", files={"main.py": "x"})
    with pytest.raises(SandboxInputError, match="text"):
        Program(b"print(1)")  # type: ignore[arg-type]


def test_result_to_dict_is_json() -> None:
    result = RunResult(
        Outcome.KILLED, KillReason.OUTPUT, None, 9, 0.123456, None, "a", "b", 2, False, "bwrap"
    )
    data = json.loads(json.dumps(result.to_dict()))
    assert data["outcome"] == "killed" and data["kill_reason"] == "output" and data["duration_s"] == 0.1235
    assert result.output_tail == "a\nb" and not result.passed


def test_settings_drive_limits_and_env_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SCICODEPILE_SANDBOX_MEMORY_MB", "512")
    monkeypatch.setenv("SCICODEPILE_SANDBOX_ENV_ROOT", str(tmp_path))
    settings = load_settings()
    assert Limits.from_settings(settings).memory_mb == 512
    assert sandbox_env_dir(settings) == tmp_path / f"sandbox-venv-{requirements_hash()}"
    monkeypatch.setenv("SCICODEPILE_SANDBOX_TIMEOUT_S", "0")
    with pytest.raises(Exception, match="SCICODEPILE_SANDBOX_TIMEOUT_S"):
        load_settings()


def test_requirements_hash_matches_the_build_script() -> None:
    import subprocess

    from scicodepile.sandbox.base import REQUIREMENTS_FILE

    out = subprocess.run(["sha256sum", str(REQUIREMENTS_FILE)], capture_output=True, text=True, check=True)
    assert out.stdout[:12] == requirements_hash()


def test_uid_pool_never_leases_one_uid_twice(tmp_path: Path) -> None:
    pool = UidPool(base=5000, slots=3, lock_dir=tmp_path)
    other = UidPool(base=5000, slots=3, lock_dir=tmp_path)  # another process's pool: the flock decides
    held: list[int] = []
    with pool.lease() as a, other.lease() as b, pool.lease() as c:
        held = [a, b, c]
        assert len(set(held)) == 3 and all(5000 <= u < 5003 for u in held)
        waiting: list[int] = []
        t = threading.Thread(target=lambda: waiting.append(other.lease().__enter__()))
        t.start()
        t.join(0.2)
        assert t.is_alive() and not waiting  # all three taken: the fourth waits
    t.join(5)
    assert waiting and waiting[0] in held
    pool.close()
    other.close()
