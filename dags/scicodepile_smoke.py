"""
### SciCodePile smoke run

Proves the platform's wiring before any stage runs: migrates the application database, writes a
small Parquet shard with its manifest to the object store, reads it back and registers the artifact.
Run it first on a new deployment (`make demo` does).
"""

from __future__ import annotations

from airflow.sdk import dag, task

from scicodepile_airflow.defaults import DEFAULT_ARGS, START_DATE, TAGS


@dag(
    dag_id="scicodepile_smoke",
    schedule=None,
    start_date=START_DATE,
    catchup=False,
    default_args=DEFAULT_ARGS,
    tags=[*TAGS, "smoke"],
    doc_md=__doc__,
)
def scicodepile_smoke() -> None:
    @task
    def migrate_database() -> str:
        from scicodepile.smoke import migrate_database as migrate
        from scicodepile_airflow.hooks import library_settings

        return migrate(library_settings())

    @task
    def probe_store(database: str) -> dict:
        from scicodepile.smoke import probe_store as probe
        from scicodepile_airflow.hooks import library_settings

        report = probe(library_settings())
        return {"database": database, **report.to_dict()}

    probe_store(migrate_database())


scicodepile_smoke()
