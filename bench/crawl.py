"""Crawl benchmark: how much of GitHub's allowed search rate the crawler uses, and how few requests.

On the local server that speaks GitHub's search API (tests/fakes/github_server.py) with GitHub's limits
(30 search requests per minute with a token) on a scaled clock, a generated population and the
crawl's own queries (synonym-table expansion of the seed vocabulary):

* ``ours`` = rate_share: requests that spent quota in the rate windows before the last one (as the
  server's limiter counts them, idle windows included), divided by what those windows allowed
  (limit x windows); the last, partial window is left out since the crawl ended in it.
  ``peer`` = 1.0, the ideal client that spends every allowed request.
* ``requests_made`` vs ``requests_min``: the lower bound sum over queries of ceil(matches / 100),
  pages of 100 that any crawler needs even without the 1,000-result cap; ``requests_ratio`` =
  made / min (target <= 1.1).  Splitting windows over the cap costs the difference.
* ``avoidable_rejections`` (must be 0), ``found`` == ``expected``.
Knobs: BENCH_CRAWL_REPOS (default 20000), BENCH_CRAWL_QUERIES (24), BENCH_CRAWL_SCALE (10: a minute
lasts 6 s), BENCH_CRAWL_ERROR_RATE (0.02 random 502s), BENCH_CRAWL_SECONDARY_RATE (0.0).
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
from pathlib import Path

from sqlalchemy import select

from _common import emit
from scicodepile.crawl.queries import expand_queries
from scicodepile.crawl.stage import run_crawl_stage
from scicodepile.db import migrate, session_scope
from scicodepile.db.models import Repository
from scicodepile.runner import RunContext
from scicodepile.settings import load_settings
from tests.fakes.github_server import FakeGitHub, generate_population

REPOS = int(os.environ.get("BENCH_CRAWL_REPOS", "20000"))
QUERIES = int(os.environ.get("BENCH_CRAWL_QUERIES", "24"))
SCALE = float(os.environ.get("BENCH_CRAWL_SCALE", "10"))
ERROR_RATE = float(os.environ.get("BENCH_CRAWL_ERROR_RATE", "0.02"))
SECONDARY_RATE = float(os.environ.get("BENCH_CRAWL_SECONDARY_RATE", "0.0"))
MIN_STARS = 2


def main() -> None:
    logging.basicConfig(level=logging.WARNING)
    with tempfile.TemporaryDirectory() as tmp:
        base = {
            "var_dir": Path(tmp) / "var",
            "crawl_max_queries": QUERIES,
            "github_min_stars": MIN_STARS,
            "crawl_since": "2009-01-01",
            "github_token": "bench-token",
            "github_rate_margin_s": 0.01,
            "github_backoff_s": 0.01,
            "github_secondary_wait_s": 60 / SCALE,
        }
        specs, _ = expand_queries(load_settings(**base))
        terms = [q.text for q in specs]
        population = generate_population(terms, n=REPOS, seed=42)
        with FakeGitHub(
            population,
            time_scale=SCALE,
            error_rate=ERROR_RATE,
            secondary_rate=SECONDARY_RATE,
            secondary_retry_s=60.0,
            token="bench-token",
        ) as gh:
            settings = load_settings(**base, github_api_url=gh.url)
            migrate(settings)
            matches = {t: len(gh.expected([t], MIN_STARS)) for t in terms}
            expected = gh.expected(terms, MIN_STARS)
            report = run_crawl_stage(
                RunContext(settings=settings, source="github", params={"until": "2026-11-01"})
            )
            with session_scope(settings) as s:
                found = {int(x) for x in s.scalars(select(Repository.source_id))}
            search = [e for e in gh.log if e["path"] == "/search/repositories"]
            spent = [e for e in search if e.get("kind") not in ("primary", "during_retry_after")]
            window = 60 / SCALE
            limit = gh.limiter(True).limit
            first, last_reset = search[0]["window_reset"], search[-1]["window_reset"]
            last = round((last_reset - first) / window)  # complete windows before the last one
            full = [e for e in spent if e["window_reset"] < last_reset]
            share = len(full) / (limit * last) if last else float("nan")
            made = len(search)
            minimum = sum(math.ceil(n / 100) for n in matches.values())
    emit(
        "crawl",
        "rate_share",
        share,
        1.0,
        "ideal client (every allowed search request)",
        requests_made=made,
        requests_min=minimum,
        requests_ratio=round(made / minimum, 4),
        requests_ok_ratio=round(len([e for e in search if e["status"] == 200]) / minimum, 4),
        requests_ok=len([e for e in search if e["status"] == 200]),
        windows=last + 1,
        splits=report.details.get("splits", 0),
        avoidable_rejections=gh.avoidable,
        secondary_limits=gh.secondary,
        error_rate=ERROR_RATE,
        found=len(found),
        expected=len(expected),
        complete=found == expected,
        repos=REPOS,
        queries=len(terms),
        time_scale=SCALE,
    )


if __name__ == "__main__":
    main()
