"""
### SciCodePile curate

Turns candidate repositories into the F1 corpus. Scheduled by the `scicodepile_candidates` Asset
(each successful crawl), or triggered by hand with the form's params; an asset-triggered run follows
the source, path and shard count of the crawl that triggered it.

* **plan** shards the candidate repositories (hash of the repository id mod `shards`);
* **curate** is mapped over the shards: repository filters (README check may call the LLM: `llm`
  pool), fetch at a pinned commit, safe extraction, file filters, licences, redaction, exact hashes
  and MinHash signatures; every rejection is recorded with its reason;
* **dedup** finds exact and near duplicates across the whole corpus and decides what to keep;
* **publish** is mapped over the shards again and writes F1 Parquet shards with manifests;
* **gate_f1** runs the great-expectations suite on what was published: a failure stops here, names
  the failed expectation, and the `scicodepile_f1` Asset (which schedules the next stage) is not
  updated.
"""

from __future__ import annotations

from datetime import timedelta

from airflow.sdk import dag, task

from scicodepile_airflow.assets import CANDIDATES, F1
from scicodepile_airflow.defaults import DEFAULT_ARGS, LLM_POOL, START_DATE, TAGS
from scicodepile_airflow.params import curate_params


@dag(
    dag_id="scicodepile_curate",
    schedule=[CANDIDATES],
    start_date=START_DATE,
    catchup=False,
    max_active_runs=1,
    default_args=DEFAULT_ARGS,
    params=curate_params(),
    tags=[*TAGS, "curate"],
    doc_md=__doc__,
)
def scicodepile_curate() -> None:
    @task(execution_timeout=timedelta(minutes=15))
    def plan() -> list[dict]:
        from scicodepile.curate.stage import plan_curate
        from scicodepile_airflow.context import stage_context

        return plan_curate(stage_context("curate"))

    @task(pool=LLM_POOL, execution_timeout=timedelta(hours=3))
    def curate(ref: dict) -> dict:
        from scicodepile.curate.stage import curate_shard
        from scicodepile_airflow.context import stage_context

        return curate_shard(stage_context("curate"), ref)

    @task(execution_timeout=timedelta(hours=2))
    def dedup(reports: list[dict]) -> dict:
        from scicodepile.curate.stage import dedup_corpus
        from scicodepile_airflow.context import stage_context

        return dedup_corpus(stage_context("curate"), list(reports))

    @task(execution_timeout=timedelta(hours=1))
    def publish(ref: dict) -> dict:
        from scicodepile.curate.stage import publish_shard
        from scicodepile_airflow.context import stage_context

        return publish_shard(stage_context("curate"), ref)

    @task(outlets=[F1], execution_timeout=timedelta(minutes=30))
    def gate_f1(published: list[dict]) -> dict:
        """Quality gate: a failed expectation fails at once (a data fault); other errors retry."""
        from airflow.sdk import get_current_context
        from airflow.sdk.exceptions import AirflowFailException

        from scicodepile.curate.stage import gate_f1 as run_gate
        from scicodepile.errors import QualityGateFailed
        from scicodepile_airflow.context import asset_extra, stage_context

        context = get_current_context()
        ctx = stage_context("curate", context)
        try:
            result = run_gate(ctx)
        except QualityGateFailed as exc:
            raise AirflowFailException(str(exc)) from exc
        context["outlet_events"][F1].extra = {
            **asset_extra(ctx, {"kept": sum(int(p.get("kept", 0)) for p in published)}),
            "shards": len(published),
        }
        return result

    refs = plan()
    deduped = dedup(curate.expand(ref=refs))
    published = publish.expand(ref=refs)
    deduped >> published
    gate_f1(published)


scicodepile_curate()
