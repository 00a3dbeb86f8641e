"""DAG integrity: every DAG file imports cleanly, touches no Connection or Variable at parse time,
and declares an owner, tags, retries with exponential backoff and a doc.  dag_id = file name."""

from __future__ import annotations

from pathlib import Path

import pytest

DAGS_DIR = Path(__file__).resolve().parents[2] / "dags"
DAG_FILES = sorted(p for p in DAGS_DIR.glob("*.py") if not p.name.startswith("_"))


@pytest.fixture(scope="module")
def dagbag():
    from airflow.dag_processing.dagbag import DagBag
    from airflow.sdk import BaseHook, Variable

    def forbidden(*_a, **_k):
        raise AssertionError("a DAG file read a Connection or Variable at parse time")

    mp = pytest.MonkeyPatch()
    mp.setattr(BaseHook, "get_connection", classmethod(forbidden))
    mp.setattr(Variable, "get", staticmethod(forbidden))
    try:
        return DagBag(dag_folder=str(DAGS_DIR))
    finally:
        mp.undo()


def test_there_are_dag_files() -> None:
    assert DAG_FILES, "no DAG files found"


def test_no_import_errors(dagbag) -> None:
    assert dagbag.import_errors == {}


@pytest.mark.parametrize("path", DAG_FILES, ids=lambda p: p.stem)
def test_dag_contract(dagbag, path: Path) -> None:
    dag = dagbag.dags.get(path.stem)
    assert dag is not None, f"{path.name} must define a DAG whose dag_id is {path.stem!r}"
    assert dag.doc_md and len(dag.doc_md.strip()) > 40, "each DAG needs a doc (module docstring)"
    assert dag.tags and "scicodepile" in dag.tags
    for t in dag.tasks:
        assert t.owner and t.owner != "airflow", f"{t.task_id}: owner"
        assert t.retries >= 1, f"{t.task_id}: retries"
        assert t.retry_exponential_backoff, f"{t.task_id}: exponential backoff"


def test_dag_files_only_wire() -> None:
    """Thin DAG files: no library-heavy imports at module level besides airflow and our glue."""
    import ast

    allowed = ("airflow", "scicodepile_airflow", "__future__", "datetime", "pendulum", "typing")
    for path in DAG_FILES:
        tree = ast.parse(path.read_text())
        for node in tree.body:
            if isinstance(node, ast.Import | ast.ImportFrom):
                mod = node.module if isinstance(node, ast.ImportFrom) else node.names[0].name
                assert mod and mod.split(".")[0] in allowed, f"{path.name}: top-level import of {mod}"
