"""Per-run overhead of the bubblewrap sandbox.

The same trivial program runs N times bare (``subprocess.run`` of the sandbox's own interpreter, with the
same flags) and N times through ``BwrapSandbox.run``, interleaved so machine noise hits both alike.
ours = sandboxed minus bare milliseconds per run (median of the interleaved pairs; lower is better);
peer = the bare run's milliseconds.  Target: ours < 20 ms.  Each run's output is checked, so a sandbox
that fails to start cannot look fast.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from _common import emit
from scicodepile.sandbox import Outcome, Program
from scicodepile.sandbox.bwrap import BwrapSandbox
from scicodepile.settings import load_settings

RUNS = int(os.environ.get("BENCH_SANDBOX_RUNS", "60"))
SOURCE = "import sys\nprint('ok', sys.version_info[0])\n"


def main() -> None:
    sandbox = BwrapSandbox(load_settings())
    python = str(sandbox.python)
    with tempfile.TemporaryDirectory() as tmp:
        script = Path(tmp) / "main.py"
        script.write_text(SOURCE)
        script.chmod(0o644)
        sandbox.run(Program(SOURCE), timeout=30)  # warm-up and self-check
        bare_ms, ours_ms = [], []
        for _ in range(RUNS):
            start = time.perf_counter()
            done = subprocess.run([python, "-E", "-s", "-B", str(script)], capture_output=True, check=True)
            bare_ms.append((time.perf_counter() - start) * 1000)
            assert done.stdout == b"ok 3\n", done
            start = time.perf_counter()
            result = sandbox.run(Program(SOURCE), timeout=30)
            ours_ms.append((time.perf_counter() - start) * 1000)
            assert result.outcome is Outcome.PASS and result.stdout == "ok 3\n", result
    overhead = statistics.median(o - b for o, b in zip(ours_ms, bare_ms, strict=True))
    bare = statistics.median(bare_ms)
    emit("sandbox", "overhead_ms", overhead, bare, "bare subprocess.run (same interpreter, same program)",
         higher_is_better=False, runs=RUNS, sandboxed_ms=round(statistics.median(ours_ms), 2),
         target_ms=20, meets_target=overhead < 20)  # fmt: skip


if __name__ == "__main__":
    main()
