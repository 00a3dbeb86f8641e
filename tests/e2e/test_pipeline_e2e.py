"""End to end on real Airflow 3 with the CeleryExecutor: API server, scheduler, DAG processor and
a Celery worker against Postgres, Redis and the S3 test server.  Runs are triggered through the
REST API the way the UI does it."""

from __future__ import annotations

import pytest
from sqlalchemy import select

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]


def test_smoke_dag_runs_through_the_rest_api(cluster, app_settings) -> None:
    from scicodepile.db import session_scope
    from scicodepile.db.models import Artifact
    from scicodepile.store import open_store

    cluster.wait_dag_parsed(["scicodepile_smoke"])
    cluster.unpause("scicodepile_smoke")
    run_id = cluster.trigger("scicodepile_smoke")
    state = cluster.wait_run("scicodepile_smoke", run_id)
    assert state == "success", cluster.describe("scicodepile_smoke", run_id)

    tis = cluster.task_instances("scicodepile_smoke", run_id)
    assert {t["task_id"]: t["state"] for t in tis} == {
        "migrate_database": "success",
        "probe_store": "success",
    }
    # the tasks ran on the Celery worker (it logs every task it receives), not in the scheduler
    assert cluster.tail("worker", 10**7).count(run_id) >= 2, cluster.tail("worker")
    with session_scope(app_settings) as s:
        rows = s.execute(select(Artifact.key, Artifact.rows).where(Artifact.stage == "smoke")).all()
    assert len(rows) == 1 and rows[0].rows == 10
    assert open_store(app_settings).exists(rows[0].key)
