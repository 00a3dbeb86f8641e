"""The Assets that link the stages, defined once.

A stage's last task lists its Asset in ``outlets``; the next stage's DAG is scheduled on it.  The
asset event carries a small ``extra`` (source, path, run key, counts) so the consumer knows which
crawl it follows; the data itself is read from the application database and the object store.
"""

from __future__ import annotations

from airflow.sdk import Asset

CANDIDATES = Asset(
    name="scicodepile_candidates",
    uri="scicodepile://app-db/repositories",
    group="scicodepile",
    extra={"produced_by": "scicodepile_crawl", "table": "repositories"},
)
"""Candidate repositories upserted by the crawl (application database, ``repositories``)."""

F1 = Asset(
    name="scicodepile_f1",
    uri="scicodepile://store/f1",
    group="scicodepile",
    extra={"produced_by": "scicodepile_curate", "prefix": "f1/"},
)
"""The F1 corpus: validated Parquet shards and manifests in the object store (``f1/<slug>/``)."""

STAGE_ASSETS = {"crawl": CANDIDATES, "curate": F1}
