"""A recrawl of a local folder marks changed repositories (and only those) for re-curation."""

from __future__ import annotations

import os
import time
from pathlib import Path

from sqlalchemy import select

from scicodepile.crawl.stage import run_crawl_stage
from scicodepile.db import migrate, session_scope
from scicodepile.db.models import Repository
from scicodepile.runner import RunContext


def _flags(settings) -> dict[str, bool]:
    with session_scope(settings) as s:
        return {r.source_id: r.needs_recurate for r in s.scalars(select(Repository))}


def test_changed_local_repository_is_marked_for_recuration(local_settings, tmp_path: Path) -> None:
    src = tmp_path / "repos"
    for name in ("alpha", "beta"):
        (src / name).mkdir(parents=True)
        (src / name / "solver.py").write_text(f"def {name}(x):\n    return x * 2\n")
    migrate(local_settings)
    ctx = RunContext(settings=local_settings, source="local", path=src)
    run_crawl_stage(ctx)
    assert _flags(local_settings) == {"alpha": True, "beta": True}  # new: to be curated

    with session_scope(local_settings) as s:  # as the curate stage does once it has curated them
        for repo in s.scalars(select(Repository)):
            repo.needs_recurate = False
    run_crawl_stage(RunContext(settings=local_settings, source="local", path=src, run="second"))
    assert _flags(local_settings) == {"alpha": False, "beta": False}  # unchanged: not refetched

    later = time.time() + 5
    (src / "beta" / "solver.py").write_text("def beta(x):\n    return x * 3\n")
    os.utime(src / "beta" / "solver.py", (later, later))
    run_crawl_stage(RunContext(settings=local_settings, source="local", path=src, run="third"))
    assert _flags(local_settings) == {"alpha": False, "beta": True}
