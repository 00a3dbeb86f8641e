"""The library never imports Airflow (STYLE.md principle 2)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

LIB = Path(__file__).resolve().parents[2] / "include" / "scicodepile"


def test_no_airflow_import_in_library_source() -> None:
    offenders = []
    for path in LIB.rglob("*.py"):
        tree = ast.parse(path.read_text(), filename=str(path))
        for node in ast.walk(tree):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(LIB)}: {n}" for n in names if n.split(".")[0] == "airflow"]
    assert offenders == []


def test_library_imports_without_airflow_loaded() -> None:
    code = (
        "import sys, pkgutil, importlib, scicodepile\n"
        "for m in pkgutil.walk_packages(scicodepile.__path__, 'scicodepile.'):\n"
        "    if '.migrations' in m.name: continue\n"
        "    importlib.import_module(m.name)\n"
        "assert not any(k == 'airflow' or k.startswith('airflow.') for k in sys.modules), 'airflow loaded'\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(LIB.parent), "PATH": "/usr/bin:/bin"},
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
