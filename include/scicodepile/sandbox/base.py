"""The sandbox interface: run untrusted Python programs and report a closed set of outcomes.

Every generated program and every benchmark harness runs through a :class:`Sandbox`; nothing
untrusted ever runs in a worker process.  Two backends share this interface: bubblewrap
(:mod:`scicodepile.sandbox.bwrap`, the default) and Docker (:mod:`scicodepile.sandbox.docker`).

Outcomes form a closed set (:class:`Outcome`): ``pass`` (exit status 0), ``fail`` (the program ran and
its checks failed: an ``AssertionError`` or a plain non-zero exit), ``error`` (it crashed: a syntax
error, an uncaught exception, a fatal signal), ``timeout`` (the wall clock ran out) and ``killed`` (it
hit a resource limit; :class:`KillReason` says which).  The classification reads the program's own
stderr, so a hostile program can relabel its own failure (say, as ``killed: memory``) but can never
turn a failure into ``pass``: that takes exit status 0.
"""

from __future__ import annotations

import abc
import enum
import hashlib
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from scicodepile.errors import ConfigError, SciCodePileError
from scicodepile.settings import DATA_DIR

if TYPE_CHECKING:
    from scicodepile.settings import Settings

REQUIREMENTS_FILE = DATA_DIR / "sandbox-requirements.txt"
"""Pins of the sandbox's interpreter environment; its hash names the venv folder."""

MAX_SOURCE_BYTES = 4 << 20
"""Largest program accepted (sources are parsed on the host before anything runs)."""

_FILE_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")


class SandboxInputError(SciCodePileError):
    """Bad input to the sandbox (missing file, not Python, not UTF-8, bad timeout): nothing was run."""


class SandboxUnavailable(ConfigError):
    """The sandbox cannot run here (missing bwrap, missing interpreter environment, no Docker engine)."""


class Outcome(enum.StrEnum):
    """The closed set of run outcomes."""

    PASS = "pass"  # noqa: S105 - an outcome, not a password
    FAIL = "fail"
    ERROR = "error"
    TIMEOUT = "timeout"
    KILLED = "killed"


class KillReason(enum.StrEnum):
    """Which limit stopped a ``killed`` run."""

    MEMORY = "memory"
    OUTPUT = "output"
    PROCESSES = "processes"
    CPU = "cpu"
    DISK = "disk"


@dataclass(frozen=True)
class Limits:
    """Per-run resource limits (see the ``sandbox_*`` settings for their meaning and defaults)."""

    memory_mb: int = 2048
    max_processes: int = 64
    tmp_mb: int = 64
    tmp_inodes: int = 32768
    file_size_mb: int = 32
    open_files: int = 256
    max_output_bytes: int = 4 << 20
    tail_bytes: int = 16384

    @classmethod
    def from_settings(cls, settings: Settings) -> Limits:
        """The limits configured by ``SCICODEPILE_SANDBOX_*``."""
        return cls(
            memory_mb=settings.sandbox_memory_mb,
            max_processes=settings.sandbox_max_processes,
            tmp_mb=settings.sandbox_tmp_mb,
            tmp_inodes=settings.sandbox_tmp_inodes,
            file_size_mb=settings.sandbox_file_size_mb,
            open_files=settings.sandbox_open_files,
            max_output_bytes=settings.sandbox_max_output_bytes,
            tail_bytes=settings.sandbox_tail_bytes,
        )


@dataclass(frozen=True)
class Program:
    """One program to run: its source, optional extra read-only files beside it, and arguments.

    The source lands read-only at ``/sandbox/<name>`` and the files beside it (so ``import helper``
    works); the working directory is the private writable ``/tmp``.
    """

    source: str
    name: str = "main.py"
    files: Mapping[str, bytes | str] = field(default_factory=dict)
    argv: Sequence[str] = ()
    key: str | None = None  # the caller's id for this program (task id, sample id), echoed in results

    def __post_init__(self) -> None:
        if not isinstance(self.source, str):
            raise SandboxInputError("program source must be text (str)")
        if len(self.source.encode("utf-8", "surrogatepass")) > MAX_SOURCE_BYTES:
            raise SandboxInputError(f"program larger than {MAX_SOURCE_BYTES} bytes")
        for name in (self.name, *self.files):
            if not _FILE_NAME.match(name):
                raise SandboxInputError(f"bad file name in program: {name!r} (letters, digits, _ . - only)")
        if self.name in self.files:
            raise SandboxInputError(f"extra file {self.name!r} would hide the program")

    def payload(self) -> dict[str, bytes]:
        """Every file as bytes, the program first."""
        out = {self.name: self.source.encode("utf-8")}
        for name, data in self.files.items():
            out[name] = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        return out


@dataclass
class RunResult:
    """What happened to one program."""

    outcome: Outcome
    kill_reason: KillReason | None
    exit_code: int | None
    signal: int | None
    duration_s: float
    peak_memory_bytes: int | None
    stdout: str
    stderr: str
    output_bytes: int
    truncated: bool
    backend: str
    message: str = ""
    key: str | None = None

    @property
    def passed(self) -> bool:
        """True when the outcome is ``pass``."""
        return self.outcome is Outcome.PASS

    @property
    def output_tail(self) -> str:
        """The kept tails of stdout then stderr, for a report line."""
        return (self.stdout + ("\n" if self.stdout and self.stderr else "") + self.stderr)[-4096:]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (enums as their values)."""
        data = asdict(self)
        data["outcome"] = self.outcome.value
        data["kill_reason"] = self.kill_reason.value if self.kill_reason else None
        data["duration_s"] = round(self.duration_s, 4)
        return data


class Sandbox(abc.ABC):
    """A backend that runs one program under the limits, or many through a bounded pool."""

    name: str = "abstract"

    def __init__(self, settings: Settings, limits: Limits | None = None) -> None:
        self.settings = settings
        self.limits = limits or Limits.from_settings(settings)

    @abc.abstractmethod
    def run(self, program: Program, *, timeout: float | None = None) -> RunResult:
        """Run ``program`` to completion (or to its timeout) and classify what happened."""

    def run_batch(
        self, programs: Sequence[Program], *, timeout: float | None = None, workers: int | None = None
    ) -> list[RunResult]:
        """Run many programs through a bounded worker pool; results in input order."""
        from scicodepile.sandbox.batch import run_batch

        return run_batch(self, programs, timeout=timeout, workers=workers)

    def check_timeout(self, timeout: float | None) -> float:
        """The timeout to use: the given one, else the default; rejects 0, negatives, NaN, infinity."""
        value = self.settings.sandbox_timeout_s if timeout is None else timeout
        return validate_timeout(value)


# ------------------------------------------------------------------------------ shared helpers
def validate_timeout(value: object) -> float:
    """A positive, finite number of seconds, or :class:`SandboxInputError`."""
    try:
        seconds = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise SandboxInputError(f"timeout must be a number of seconds, got {value!r}") from None
    if not math.isfinite(seconds) or seconds <= 0:
        raise SandboxInputError(f"timeout must be a positive number of seconds, got {value!r}")
    return seconds


def load_program(path: str | Path) -> Program:
    """Read a program file for running, rejecting bad input before anything runs.

    Missing or unreadable files, non-UTF-8 bytes, and text that does not parse as Python raise
    :class:`SandboxInputError` with the reason.  The source is parsed (never compiled to bytecode or
    executed) on the host, after a size check, so a parser bomb cannot get far.
    """
    import ast

    file = Path(path)
    if not file.exists():
        raise SandboxInputError(f"no such file: {file}")
    if not file.is_file():
        raise SandboxInputError(f"not a regular file: {file}")
    try:
        with file.open("rb") as fh:  # at most one byte past the cap: a huge file is never read whole
            data = fh.read(MAX_SOURCE_BYTES + 1)
    except OSError as exc:
        raise SandboxInputError(f"cannot read {file}: {exc.strerror}") from None
    if len(data) > MAX_SOURCE_BYTES:
        raise SandboxInputError(f"{file} is larger than {MAX_SOURCE_BYTES} bytes")
    try:
        source = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SandboxInputError(f"{file} is not UTF-8 text (byte {exc.start}: {exc.reason})") from None
    if "\x00" in source:
        raise SandboxInputError(f"{file} is not Python source: it contains NUL bytes")
    try:
        ast.parse(source, filename=str(file))
    except SyntaxError as exc:
        raise SandboxInputError(f"{file} is not Python: {exc.msg} (line {exc.lineno})") from None
    except (RecursionError, MemoryError, ValueError) as exc:
        raise SandboxInputError(f"{file} is not Python that can be parsed: {type(exc).__name__}") from None
    return Program(source=source, key=str(file))


def requirements_hash(path: Path = REQUIREMENTS_FILE) -> str:
    """First 12 hex digits of the requirements file's sha256 (as ``scripts/sandbox-env.sh`` computes it)."""
    return hashlib.sha256(path.read_bytes()).hexdigest()[:12]


def sandbox_env_dir(settings: Settings) -> Path:
    """The sandbox interpreter environment's folder (a venv), explicit or derived from the pins."""
    if settings.sandbox_python_env:
        return settings.sandbox_python_env
    return settings.sandbox_env_root / f"sandbox-venv-{requirements_hash()}"


def sandbox_python(settings: Settings) -> Path:
    """The sandbox's interpreter; :class:`SandboxUnavailable` with the fix when it is not built."""
    env = sandbox_env_dir(settings)
    python = env / "bin" / "python"
    if not (env / ".complete").is_file() or not python.exists():
        raise SandboxUnavailable(
            f"the sandbox interpreter environment is missing at {env}: build it with "
            "`bash scripts/sandbox-env.sh` (or `make sandbox-env`)",
            setting="SCICODEPILE_SANDBOX_PYTHON_ENV",
        )
    return python


_EXC_LINE = re.compile(r"^(?P<name>[A-Za-z_][\w.]*)(?::\s?(?P<detail>.*))?$")


def last_exception(stderr: str) -> tuple[str, str] | None:
    """``(exception name, message)`` of the traceback that ends ``stderr``, if it ends with one."""
    lines = [line for line in stderr.rstrip().splitlines() if line.strip()]
    if "Traceback (most recent call last)" not in stderr:
        # A program that does not compile gets no "Traceback" header, only File/caret lines.
        if not lines or not re.match(r"^(SyntaxError|IndentationError|TabError)\b", lines[-1]):
            return None
    for line in reversed(lines[-20:]):
        if line.startswith((" ", "\t")):
            continue
        match = _EXC_LINE.match(line)
        if match:
            return match.group("name"), (match.group("detail") or "").strip()
        break
    return None


SIGNAL_NAMES = {
    4: "SIGILL",
    6: "SIGABRT",
    7: "SIGBUS",
    8: "SIGFPE",
    9: "SIGKILL",
    11: "SIGSEGV",
    13: "SIGPIPE",
    15: "SIGTERM",
    24: "SIGXCPU",
    25: "SIGXFSZ",
}


def classify(exit_code: int, signal: int | None, stderr: str) -> tuple[Outcome, KillReason | None, str]:
    """Outcome, kill reason and a one-line message of a run that ended by itself (no timeout, no flood).

    ``signal`` is the signal that ended the program, if any.  Resource limits show as signals
    (SIGXCPU: CPU seconds; SIGXFSZ: file size) or as the exceptions Python raises when a limit bites
    (MemoryError, ``[Errno 28] No space left on device``, fork's ``[Errno 11]``).
    """
    if signal is not None:
        name = SIGNAL_NAMES.get(signal, f"signal {signal}")
        if signal == 24:
            return Outcome.KILLED, KillReason.CPU, "CPU time limit exceeded (SIGXCPU)"
        if signal == 25:
            return Outcome.KILLED, KillReason.DISK, "file size limit exceeded (SIGXFSZ)"
        if signal == 9:
            return Outcome.KILLED, KillReason.CPU, "killed by SIGKILL (hard CPU limit)"
        if re.search(r"MemoryError|Cannot allocate memory|bad_alloc", stderr[-2000:]):
            return Outcome.KILLED, KillReason.MEMORY, f"out of memory ({name})"
        return Outcome.ERROR, None, f"killed by {name}"
    if exit_code == 0:
        return Outcome.PASS, None, ""
    exc = last_exception(stderr)
    if exc is None:
        return Outcome.FAIL, None, f"exit status {exit_code}"
    exc_name, detail = exc
    text = f"{exc_name}: {detail}" if detail else exc_name
    short = exc_name.rsplit(".", 1)[-1]
    if short.endswith("MemoryError"):
        return Outcome.KILLED, KillReason.MEMORY, text[:300]
    if "[Errno 28]" in detail or "[Errno 27]" in detail or "[Errno 122]" in detail:
        return Outcome.KILLED, KillReason.DISK, text[:300]
    fork_refused = "[Errno 11]" in detail and short in ("BlockingIOError", "OSError")
    if fork_refused or "can't start new thread" in detail:
        return Outcome.KILLED, KillReason.PROCESSES, text[:300]
    if short == "AssertionError":
        return Outcome.FAIL, None, text[:300]
    return Outcome.ERROR, None, text[:300]


class TailBuffer:
    """Keeps the last ``limit`` bytes written to it and counts all of them: a flood costs no memory."""

    __slots__ = ("_buf", "limit", "total")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.total = 0
        self._buf = bytearray()

    def write(self, data: bytes) -> None:
        """Append ``data``, trimming to the last ``limit`` bytes once the buffer doubles."""
        self.total += len(data)
        self._buf += data[-self.limit :]
        if len(self._buf) > 2 * self.limit:
            del self._buf[: len(self._buf) - self.limit]

    @property
    def truncated(self) -> bool:
        return self.total > self.limit

    def text(self) -> str:
        """The kept tail as text (invalid UTF-8 replaced)."""
        return bytes(self._buf[-self.limit :]).decode("utf-8", "replace")


def open_sandbox(settings: Settings, limits: Limits | None = None) -> Sandbox:
    """The backend chosen by ``SCICODEPILE_SANDBOX_BACKEND`` (imported lazily)."""
    if settings.sandbox_backend == "docker":
        from scicodepile.sandbox.docker import DockerSandbox

        return DockerSandbox(settings, limits)
    from scicodepile.sandbox.bwrap import BwrapSandbox

    return BwrapSandbox(settings, limits)
