"""ruff (with the AIR rules) keeps the code uniform; the suite fails on a lint error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATHS = ["include", "plugins", "dags", "tests", "bench"]


def test_ruff_check_is_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "check", *PATHS], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]


def test_ruff_format_is_clean() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--check", *PATHS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
