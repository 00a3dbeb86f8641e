"""The GitHub crawl against a local server speaking the search API, on real Postgres."""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select, update

from scicodepile.crawl.queries import expand_queries
from scicodepile.crawl.stage import plan_crawl, run_crawl_stage
from scicodepile.db import session_scope
from scicodepile.db.models import Rejection, Repository, SearchPartition
from scicodepile.runner import RunContext
from scicodepile.settings import Settings, load_settings
from tests.fakes.github_server import FakeGitHub, generate_population
from tests.support.services import postgres_database

pytestmark = pytest.mark.integration

MIN_STARS = 2
UNTIL = "2026-11-01"


@pytest.fixture
def pg_settings(tmp_path: Path) -> Iterator[Settings]:
    """A fresh Postgres database per test: the crawl is idempotent, so tests must not share partitions."""
    from scicodepile.db import migrate

    with postgres_database("scicodepile_crawl") as url:
        settings = load_settings(var_dir=tmp_path / "var", database_url=url)
        migrate(settings)
        yield settings


def crawl_overrides(url: str, max_queries: int = 10) -> dict[str, Any]:
    """Settings for a crawl against the fake server (short margins: its clock runs 60x faster)."""
    return {
        "github_api_url": url,
        "github_token": "test-token",
        "github_rate_margin_s": 0.01,
        "github_backoff_s": 0.01,
        "github_secondary_wait_s": 0.1,
        "crawl_max_queries": max_queries,
        "github_min_stars": MIN_STARS,
        "crawl_since": "2009-01-01",
    }


def query_terms(tmp_path: Path, max_queries: int = 10) -> list[str]:
    specs, _ = expand_queries(load_settings(var_dir=tmp_path, crawl_max_queries=max_queries))
    return [q.text for q in specs]


def with_github(settings: Settings, url: str, **extra: Any) -> Settings:
    return load_settings(
        var_dir=settings.var_dir, database_url=settings.database_url, **{**crawl_overrides(url), **extra}
    )


def repo_ids(settings: Settings) -> list[int]:
    with session_scope(settings) as s:
        return [int(x) for x in s.scalars(select(Repository.source_id).where(Repository.source == "github"))]


def test_crawl_finds_every_repository_once_within_the_rate_limit(
    pg_settings: Settings, tmp_path: Path
) -> None:
    terms = query_terms(tmp_path)
    population = generate_population(terms, n=6000, seed=3)
    faults = {3: "502", 4: "502", 9: "secondary", 20: "502", 31: "secondary"}
    with FakeGitHub(
        population, time_scale=60, secondary_rate=0.01, error_rate=0.02, scripted_faults=faults
    ) as gh:
        expected = gh.expected(terms, MIN_STARS)
        per_query = {t: len(gh.expected([t], MIN_STARS)) for t in terms}
        assert max(per_query.values()) > 1000, "the population must exercise the 1,000-result cap"
        settings = with_github(pg_settings, gh.url)
        ctx = RunContext(settings=settings, source="github", params={"until": UNTIL})
        report = run_crawl_stage(ctx)

        found = repo_ids(settings)
        assert len(found) == len(set(found))  # one row per repository
        assert set(found) == expected  # every repository, none invented
        assert gh.avoidable == 0  # never refused for a limit it could have respected
        statuses = [e["status"] for e in gh.log if e["path"] == "/search/repositories"]
        assert 502 in statuses and gh.secondary > 0  # the faults really happened and were survived
        assert report.details["splits"] >= 1
        assert report.details["api_calls"]["search"] == len(statuses)
        assert not report.rejected

        with session_scope(settings) as s:
            parts = list(s.scalars(select(SearchPartition)))
            assert {p.status for p in parts} == {"done", "split"}
            assert all(p.total_count <= 1000 for p in parts if p.status == "done")
            # a repository matched by several queries is one row listing them all
            multi = s.scalars(select(Repository).where(Repository.source == "github")).all()
            by_queries = Counter(len(r.queries) for r in multi)
            assert by_queries[2] > 0
            matched_by = {t: gh.expected([t], MIN_STARS) for t in terms}
            for repo in multi:
                assert set(repo.queries) == {t for t in terms if int(repo.source_id) in matched_by[t]}

        # a rerun finds every partition finished: no search request at all
        before = len(gh.log)
        assert plan_crawl(ctx) == []
        again = run_crawl_stage(ctx)
        assert [e for e in gh.log[before:] if e["path"] == "/search/repositories"] == []
        assert again.kept == 0 and sorted(repo_ids(settings)) == sorted(found)


def test_bad_answers_fail_only_their_partition_with_a_reason(pg_settings: Settings, tmp_path: Path) -> None:
    terms = query_terms(tmp_path)
    population = generate_population(terms, n=1500, seed=5)
    broken_json, invalid = terms[1], terms[2]
    expected_all = None
    with FakeGitHub(population, time_scale=60) as probe:
        expected_all = probe.expected(terms, MIN_STARS)
    missing = sorted(expected_all)[:5]
    with FakeGitHub(
        population,
        time_scale=60,
        malformed_terms=(broken_json,),
        invalid_terms=(invalid,),
        missing_field_ids=tuple(missing),
    ) as gh:
        settings = with_github(pg_settings, gh.url)
        report = run_crawl_stage(RunContext(settings=settings, source="github", params={"until": UNTIL}))
        healthy = gh.expected([t for t in terms if t not in (broken_json, invalid)], MIN_STARS)
        found = set(repo_ids(settings))
        assert healthy - set(missing) <= found  # the rest of the crawl went on
        assert not found & set(missing)  # items without stargazers_count are not invented
        with session_scope(settings) as s:
            parts = {p.id: p for p in s.scalars(select(SearchPartition))}
            failed = [p for p in parts.values() if p.status == "failed"]
            errors = sorted(p.last_error.split(":")[0] for p in failed)
            assert errors == ["invalid_query", "malformed_json"]
            assert all(p.attempts == 1 for p in failed)
            rejections = Counter((r.subject_type, r.reason) for r in s.scalars(select(Rejection)))
        assert rejections[("search_item", "missing_field:stargazers_count")] == len(missing)
        assert rejections[("search_partition", "invalid_query")] == 1
        assert rejections[("search_partition", "malformed_json")] == 1
        assert report.rejected["partition_invalid_query"] == 1
        assert report.rejected["missing_field:stargazers_count"] >= len(missing)  # once per query that saw it

        # only_failed retries exactly the failed partitions (here they fail again, attempts grow)
        ctx = RunContext(settings=settings, source="github", params={"until": UNTIL, "only_failed": True})
        refs = plan_crawl(ctx)
        assert len(refs) == 2
        before = len(gh.log)
        run_crawl_stage(ctx)
        retried = {e["q"].split(" ")[0].strip('"') for e in gh.log[before:] if "q" in e}
        assert all(any(t.startswith(r) for t in (broken_json, invalid)) for r in retried)
        with session_scope(settings) as s:
            assert sorted(
                p.attempts for p in s.scalars(select(SearchPartition)).all() if p.status == "failed"
            ) == [2, 2]


def test_backfill_of_three_intervals_makes_disjoint_partitions(pg_settings: Settings, tmp_path: Path) -> None:
    terms = query_terms(tmp_path, max_queries=4)
    population = generate_population(terms, n=3000, seed=7)
    intervals = [
        ("2026-08-01T00:00:00Z", "2026-09-01T00:00:00Z"),
        ("2026-09-01T00:00:00Z", "2026-10-01T00:00:00Z"),
        ("2026-10-01T00:00:00Z", "2026-11-01T00:00:00Z"),
    ]
    with FakeGitHub(population, time_scale=60) as gh:
        settings = with_github(pg_settings, gh.url, crawl_max_queries=4)
        runs: dict[str, set[int]] = {}
        for i, (start, end) in enumerate(intervals):
            ctx = RunContext(
                settings=settings,
                source="github",
                run=f"backfill-{i}",
                params={"window_start": start, "window_end": end},
            )
            run_crawl_stage(ctx)
        with session_scope(settings) as s:
            parts = list(s.scalars(select(SearchPartition)))
            for p in parts:
                runs.setdefault(p.run_id, set()).add(p.id)
            assert sorted(runs) == ["backfill-0", "backfill-1", "backfill-2"]
            a, b, c = runs.values()
            assert not (a & b or b & c or a & c)
            assert {p.field for p in parts} == {"pushed"}
            # per query, the leaf windows of the three runs tile Aug-Oct without overlap
            for qid in {p.query_id for p in parts}:
                leaves = sorted(
                    (p.window_start, p.window_end) for p in parts if p.query_id == qid and p.status == "done"
                )
                assert all(x[1] == y[0] for x, y in itertools.pairwise(leaves))
        expected = set()
        for t in terms:
            expected |= {
                r.id
                for r in gh.population
                if t in r.text
                and r.stars >= MIN_STARS
                and not r.fork
                and "2026-08-01" <= r.pushed_at.strftime("%Y-%m-%d") < "2026-11-01"
            }
        assert set(repo_ids(settings)) == expected


def test_incremental_recrawl_marks_only_updated_repositories(pg_settings: Settings, tmp_path: Path) -> None:
    from datetime import UTC, datetime

    terms = query_terms(tmp_path, max_queries=3)
    population = generate_population(terms, n=2000, seed=11)
    with FakeGitHub(population, time_scale=60) as gh:
        settings = with_github(pg_settings, gh.url, crawl_max_queries=3)
        first = {"window_start": "2026-01-01T00:00:00Z", "window_end": "2026-11-01T00:00:00Z"}
        run_crawl_stage(RunContext(settings=settings, source="github", run="day-1", params=first))
        with session_scope(settings) as s:  # curation happened: nothing needs it any more
            s.execute(update(Repository).values(needs_recurate=False))
        ids = repo_ids(settings)
        moved = [r for r in gh.population if r.id in set(ids[:3])]
        for r in moved:  # three repositories get new pushes in the next interval
            r.pushed_at = datetime(2026, 11, 1, 12, tzinfo=UTC)
        gh.touch()
        second = {"window_start": "2026-11-01T00:00:00Z", "window_end": "2026-11-02T00:00:00Z"}
        run_crawl_stage(RunContext(settings=settings, source="github", run="day-2", params=second))
        with session_scope(settings) as s:
            flagged = {
                int(x) for x in s.scalars(select(Repository.source_id).where(Repository.needs_recurate))
            }
        assert flagged == {r.id for r in moved}
