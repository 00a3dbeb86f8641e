"""Run untrusted generated code safely: bubblewrap here, Docker where an engine exists.

``open_sandbox(settings).run(Program(source))`` returns a :class:`RunResult` whose ``outcome`` is one of
pass, fail, error, timeout, killed; ``run_batch`` runs many programs through a bounded pool.
"""

from scicodepile.sandbox.base import (
    KillReason,
    Limits,
    Outcome,
    Program,
    RunResult,
    Sandbox,
    SandboxInputError,
    SandboxUnavailable,
    load_program,
    open_sandbox,
    sandbox_env_dir,
)
from scicodepile.sandbox.batch import run_batch

__all__ = [
    "KillReason",
    "Limits",
    "Outcome",
    "Program",
    "RunResult",
    "Sandbox",
    "SandboxInputError",
    "SandboxUnavailable",
    "load_program",
    "open_sandbox",
    "run_batch",
    "sandbox_env_dir",
]
