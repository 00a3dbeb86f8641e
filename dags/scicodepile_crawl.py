"""
### SciCodePile crawl

Finds candidate repositories and upserts them into the application database (`repositories`).

* **plan** creates or loads the queries and search partitions (query expansion may call the LLM:
  `llm` pool) and returns small refs, one per coarse partition;
* **crawl** is mapped over the refs (dynamic task mapping), through the `github_search` pool so all
  workers together respect GitHub's search rate limit; each partition is resumable (cursor in the
  database) and its writes are upserts, so a retry after a lost worker duplicates nothing;
* **finish** merges the reports (totals, API spend);
* **announce** updates the `scicodepile_candidates` Asset, which schedules `scicodepile_curate`, with
  the crawl's source, path and window in the event's extra; it is skipped when the crawl found no new
  or updated candidates, so an empty incremental crawl does not start a curate run.

Scheduled daily with catch-up off: a scheduled or backfill run crawls its data interval
(`window_start`/`window_end`) of the source in `SCICODEPILE_DEFAULT_SOURCE` (github in production);
a manual run crawls everything unless the trigger form sets a window.
`only_failed` retries just the partitions that failed before.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import CronDataIntervalTimetable, dag, task

from scicodepile_airflow.assets import CANDIDATES
from scicodepile_airflow.defaults import DEFAULT_ARGS, GITHUB_SEARCH_POOL, LLM_POOL, START_DATE, TAGS
from scicodepile_airflow.params import crawl_params


@dag(
    dag_id="scicodepile_crawl",
    # a real data interval (yesterday 00:00 .. today 00:00) per run: the window a scheduled or backfill
    # run crawls.  A plain "@daily" would give runs an empty interval (CronTriggerTimetable).
    schedule=CronDataIntervalTimetable("@daily", timezone="UTC"),
    start_date=START_DATE,
    catchup=False,
    max_active_runs=3,
    default_args=DEFAULT_ARGS,
    params=crawl_params(),
    tags=[*TAGS, "crawl"],
    doc_md=__doc__,
)
def scicodepile_crawl() -> None:
    @task(pool=LLM_POOL, execution_timeout=timedelta(minutes=30))
    def plan() -> list[dict]:
        from scicodepile.crawl.stage import plan_crawl
        from scicodepile_airflow.context import stage_context

        return plan_crawl(stage_context("crawl"))

    @task(pool=GITHUB_SEARCH_POOL, execution_timeout=timedelta(hours=2), map_index_template="{{ ref_name }}")
    def crawl(ref: dict) -> dict:
        from airflow.sdk import get_current_context

        from scicodepile.crawl.stage import crawl_partition
        from scicodepile_airflow.context import stage_context

        context = get_current_context()
        context["ref_name"] = str(ref.get("name") or ref.get("id") or ref)[:60]  # type: ignore[typeddict-unknown-key]
        return crawl_partition(stage_context("crawl", context), ref)

    @task(execution_timeout=timedelta(minutes=15))
    def finish(reports: list[dict]) -> dict:
        from scicodepile.crawl.stage import finish_crawl
        from scicodepile_airflow.context import stage_context

        return finish_crawl(stage_context("crawl"), list(reports))

    @task(outlets=[CANDIDATES], execution_timeout=timedelta(minutes=5))
    def announce(report: dict) -> dict:
        """Update the candidates Asset (which schedules curate) only when the crawl found some."""
        from airflow.sdk import get_current_context
        from airflow.sdk.exceptions import AirflowSkipException

        from scicodepile_airflow.context import asset_extra, stage_context

        if not report.get("kept"):
            raise AirflowSkipException("no new or updated candidates: curate is not triggered")
        context = get_current_context()
        extra = asset_extra(stage_context("crawl", context), report)
        context["outlet_events"][CANDIDATES].extra = extra
        return extra

    announce(finish(crawl.expand(ref=plan())))


scicodepile_crawl()
