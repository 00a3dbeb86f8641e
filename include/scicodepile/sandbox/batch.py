"""Run many programs through one sandbox backend with a bounded worker pool.

Each program gets the same guarantees as a single run (its own sandbox, uid, limits and timeout); the
pool only bounds how many run at once.  Threads suffice: a worker spends its time waiting on its
child's pipes, and the children do the computing, one per core by default.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from scicodepile.sandbox.base import Program, RunResult, Sandbox


def default_workers(configured: int = 0) -> int:
    """``configured`` when positive, else one worker per CPU core this process may use."""
    if configured > 0:
        return configured
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


def run_batch(
    sandbox: Sandbox,
    programs: Sequence[Program],
    *,
    timeout: float | None = None,
    workers: int | None = None,
    on_result: Callable[[int, RunResult], None] | None = None,
) -> list[RunResult]:
    """Run ``programs`` at most ``workers`` at a time; results in input order.

    The timeout is checked once, before anything runs, so a bad value runs nothing.  ``on_result`` is
    called (from a worker thread) as each program finishes, for progress reports.
    """
    seconds = sandbox.check_timeout(timeout)
    count = default_workers(workers or sandbox.settings.sandbox_workers)
    results: list[RunResult | None] = [None] * len(programs)
    if not programs:
        return []

    def one(index: int) -> None:
        result = sandbox.run(programs[index], timeout=seconds)
        results[index] = result
        if on_result is not None:
            on_result(index, result)

    with ThreadPoolExecutor(max_workers=min(count, len(programs)), thread_name_prefix="sandbox") as pool:
        for future in [pool.submit(one, i) for i in range(len(programs))]:
            future.result()  # re-raises a sandbox fault (not a program's failure: those are results)
    return [r for r in results if r is not None]
