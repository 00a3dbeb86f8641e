"""Kill -9 the crawl in the middle, run it again: finished partitions are not fetched again."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy import select

from scicodepile.crawl.stage import _partition_query
from scicodepile.crawl.windows import Window, parse_instant
from scicodepile.db import migrate, session_scope
from scicodepile.db.models import Query, Repository, SearchPartition
from scicodepile.settings import REPO_ROOT, load_settings
from tests.fakes.github_server import FakeGitHub, generate_population
from tests.integration.test_crawl import MIN_STARS, crawl_overrides, query_terms
from tests.support.services import postgres_database

pytestmark = pytest.mark.integration


def _env(db_url: str, gh_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCICODEPILE_")}
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "include"), str(REPO_ROOT)])
    env["SCICODEPILE_DATABASE_URL"] = db_url
    for key, value in crawl_overrides(gh_url).items():
        env[f"SCICODEPILE_{key.upper()}"] = str(value)
    return env


def _cli(out: Path, env: dict[str, str]) -> subprocess.Popen:
    cmd = [
        sys.executable,
        "-m",
        "scicodepile.cli",
        "-q",
        "run",
        "--source",
        "github",
        "--until",
        "crawl",
        "--out",
        str(out),
        "--json",
    ]
    return subprocess.Popen(
        cmd, env=env, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def test_killed_crawl_resumes_without_refetching_finished_partitions(tmp_path: Path) -> None:
    terms = query_terms(tmp_path)
    population = generate_population(terms, n=6000, seed=3)
    with postgres_database("scicodepile_crawl") as db_url, FakeGitHub(population, time_scale=20) as gh:
        settings = load_settings(var_dir=tmp_path / "var", database_url=db_url, **crawl_overrides(gh.url))
        migrate(settings)
        env = _env(db_url, gh.url)

        proc = _cli(tmp_path / "out", env)
        deadline = time.monotonic() + 120
        while proc.poll() is None and time.monotonic() < deadline:
            ok = gh.search_ok()
            last = ok[-1] if ok else None
            # kill in the middle of a partition: after 20 requests, on page 3+ of a window with 2+ pages to go
            if len(ok) >= 20 and last["page"] >= 3 and (last["page"] + 2) * 100 <= min(last["total"], 1000):
                break
            time.sleep(0.002)
        assert proc.poll() is None, f"the crawl ended before it could be killed: {proc.communicate()}"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        first_run = list(gh.search_ok())

        with session_scope(settings) as s:
            queries = {q.id: q.text for q in s.scalars(select(Query))}
            parts = list(s.scalars(select(SearchPartition)))
            done_q = set()
            resumable = {}
            for p in parts:
                window = Window(parse_instant(p.window_start), parse_instant(p.window_end))
                q = _partition_query(queries[p.query_id], p.field, window, settings)
                if p.status == "done":
                    done_q.add(q)
                elif p.status == "running" and p.cursor:
                    resumable[q] = p.cursor
        assert done_q, "some partitions finished before the kill"
        assert len(done_q) < len(parts), "and some did not"
        assert resumable, "one was killed half-way, with a cursor"

        proc = _cli(tmp_path / "out", env)
        stdout, stderr = proc.communicate(timeout=300)
        assert proc.returncode == 0, stderr[-2000:]
        summary = json.loads(stdout.strip().splitlines()[-1])
        assert summary["stages"]["crawl"]["details"]["api_calls"]["search"] > 0
        second_run = gh.search_ok()[len(first_run) :]

        # finished partitions: not one request in the second run
        assert not [e for e in second_run if e["q"] in done_q]
        # a partition killed half-way resumes from its cursor page, not page 1
        for q, cursor in resumable.items():
            pages = [e["page"] for e in second_run if e["q"] == q]
            assert pages and min(pages) > 1 and f"page={min(pages)}" in cursor
        # across both runs each (query, window, page) was fetched once, but for the one in flight at the kill
        counts = Counter((e["q"], e["page"]) for e in first_run + second_run)
        assert sum(n - 1 for n in counts.values()) <= 1
        assert gh.avoidable == 0

        with session_scope(settings) as s:
            found = {int(x) for x in s.scalars(select(Repository.source_id))}
            assert {p.status for p in s.scalars(select(SearchPartition))} <= {"done", "split"}
        assert found == gh.expected(terms, MIN_STARS)
