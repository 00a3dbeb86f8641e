"""End to end on real Airflow 3 with the CeleryExecutor: API server, scheduler, DAG processor and
a Celery worker against Postgres, Redis and the S3 test server.  Runs are triggered through the
REST API the way the UI does it.  The tests share one cluster and run in order (smoke, crawl ->
curate through the Asset, a worker killed mid-task, a backfill)."""

from __future__ import annotations

import itertools
import signal
import time
from datetime import datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from tests.e2e.cluster import AirflowCluster, wait_for
from tests.e2e.repos import make_repositories

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

CRAWL, CURATE = "scicodepile_crawl", "scicodepile_curate"


def _succeed(cluster: AirflowCluster, dag_id: str, run_id: str, timeout: float = 300) -> None:
    state = cluster.wait_run(dag_id, run_id, timeout)
    assert state == "success", cluster.describe(dag_id, run_id)


def _runs(cluster: AirflowCluster, dag_id: str, run_type: str | None = None) -> list[dict]:
    runs = cluster.request("GET", f"/api/v2/dags/{dag_id}/dagRuns?limit=100&order_by=run_after")["dag_runs"]
    return [r for r in runs if run_type is None or r["run_type"] == run_type]


def _idle(cluster: AirflowCluster, dag_id: str) -> bool:
    return all(r["state"] in ("success", "failed") for r in _runs(cluster, dag_id))


@pytest.fixture(scope="module")
def source_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    root = tmp_path_factory.mktemp("local-source")
    return root, make_repositories(root, 12, seed=1)


def test_smoke_dag_runs_through_the_rest_api(cluster, app_settings) -> None:
    from scicodepile.db import session_scope
    from scicodepile.db.models import Artifact
    from scicodepile.store import open_store

    cluster.wait_dag_parsed(["scicodepile_smoke", CRAWL, CURATE])
    cluster.unpause("scicodepile_smoke")
    run_id = cluster.trigger("scicodepile_smoke")
    _succeed(cluster, "scicodepile_smoke", run_id)

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


def test_crawl_triggers_curate_through_the_asset(cluster, app_settings, source_dir) -> None:
    """A manual crawl of the local source updates the candidates Asset; curate runs on it."""
    from scicodepile.db import session_scope
    from scicodepile.db.models import Artifact, File, Rejection, Repository
    from scicodepile.store import open_store

    root, expected = source_dir
    cluster.unpause(CURATE)
    cluster.unpause(CRAWL)  # also starts the scheduled run of the latest interval (fake GitHub)
    run_id = cluster.trigger(CRAWL, {"source": "local", "path": str(root), "shards": 2})
    _succeed(cluster, CRAWL, run_id)
    mapped = [t for t in cluster.task_instances(CRAWL, run_id) if t["task_id"] == "crawl"]
    assert sorted(t["map_index"] for t in mapped) == [0, 1], "one mapped task per shard"

    # the asset event (from the announce task) schedules curate, which inherits source and path
    curate_run = wait_for(
        lambda: next((r for r in _runs(cluster, CURATE, "asset_triggered")), None),
        180,
        what="an asset-triggered curate run",
        check=cluster.assert_alive,
    )
    _succeed(cluster, CURATE, curate_run["dag_run_id"], timeout=400)
    events = cluster.request("GET", "/api/v2/assets/events?source_dag_id=scicodepile_crawl")["asset_events"]
    local_events = [e for e in events if e["extra"].get("source") == "local"]
    assert local_events and local_events[0]["extra"]["path"] == str(root)
    tis = cluster.task_instances(CURATE, curate_run["dag_run_id"])
    assert {t["task_id"] for t in tis} == {"plan", "curate", "dedup", "publish", "gate_f1"}
    assert all(t["state"] == "success" for t in tis)

    with session_scope(app_settings) as s:
        local = dict(
            s.execute(
                select(Repository.full_name, Repository.status).where(Repository.source == "local")
            ).all()
        )
        assert set(local) >= {*expected["kept_like"], expected["gpl"], expected["cakes"]}
        assert all(local[n] == "kept" for n in expected["kept_like"])
        assert local[expected["gpl"]] == "rejected" and local[expected["cakes"]] == "rejected"
        reasons = set(s.scalars(select(Rejection.reason).where(Rejection.stage == "curate")))
        assert "license_not_permitted" in reasons
        kept_files = s.scalar(select(func.count(File.id)).where(File.kept.is_(True))) or 0
        shards = s.execute(select(Artifact.key, Artifact.rows).where(Artifact.stage == "curate")).all()
    assert kept_files >= 3 * len(expected["kept_like"])
    store = open_store(app_settings)
    assert shards and all(store.exists(k) for k, _ in shards)
    assert sum(rows or 0 for _, rows in shards) >= kept_files


def test_killed_worker_task_is_retried_without_duplicates(
    cluster, app_settings, source_dir, tmp_path
) -> None:
    """SIGKILL the Celery worker while a curate shard runs; the scheduler notices the lost task,
    retries it on a restarted worker, and the rerun duplicates nothing."""
    from scicodepile.db import session_scope
    from scicodepile.db.models import File, Repository, Snapshot
    from scicodepile.store import open_store
    from scicodepile.store.parquet import read_shard

    root = tmp_path / "more"
    extra = make_repositories(root, 40, seed=2, files=4, functions=10)
    asset_runs_before = len(_runs(cluster, CURATE, "asset_triggered"))
    crawl_id = cluster.trigger(CRAWL, {"source": "local", "path": str(root), "shards": 2})
    _succeed(cluster, CRAWL, crawl_id)
    # the scheduler creates the asset-triggered curate run a moment after the crawl's asset event:
    # wait until it exists (else "idle" could be seen before it, and it would run during the checks)
    wait_for(
        lambda: len(_runs(cluster, CURATE, "asset_triggered")) > asset_runs_before,
        120,
        what="the curate run triggered by the crawl's asset event",
        interval=1,
    )
    # wait for the curate runs this crawl triggered, then curate once more by hand with a new
    # run key and recurate_all: every shard is recomputed (nothing skipped by completion markers or
    # by "already curated"), and nothing already published may be published twice
    wait_for(lambda: _idle(cluster, CURATE) and _idle(cluster, CRAWL), 400, what="idle", interval=2)
    with session_scope(app_settings) as s:
        before = {
            "repositories": s.scalar(select(func.count(Repository.id))),
            "snapshots": s.scalar(select(func.count(Snapshot.id))),
            "files": s.scalar(select(func.count(File.id))),
            "kept": s.scalar(select(func.count(File.id)).where(File.kept.is_(True))),
        }
    assert before["files"] > 0

    run_id = cluster.trigger(
        CURATE,
        {"source": "local", "path": str(root), "shards": 2, "run": "killed-worker", "recurate_all": True},
    )

    def running_shard():
        return next(
            (
                t
                for t in cluster.task_instances(CURATE, run_id)
                if t["task_id"] == "curate" and t["state"] == "running"
            ),
            None,
        )

    victim = wait_for(running_shard, 180, what="a running curate shard", interval=0.2)
    cluster.kill("worker", signal.SIGKILL)  # the worker and its task processes, no clean-up
    killed_at = time.monotonic()
    time.sleep(3)
    cluster.start("worker", "celery", "worker", "--concurrency", "2", "--without-mingle", "--without-gossip")
    _succeed(cluster, CURATE, run_id, timeout=400)
    print(f"\nrun succeeded {time.monotonic() - killed_at:.0f}s after the worker was killed")

    ti = next(
        t
        for t in cluster.task_instances(CURATE, run_id)
        if t["task_id"] == "curate" and t["map_index"] == victim["map_index"]
    )
    assert ti["state"] == "success"
    assert ti["try_number"] >= 2, f"the killed try must have been retried: {ti}"
    history = cluster.request(
        "GET",
        f"/api/v2/dags/{CURATE}/dagRuns/{run_id}/taskInstances/curate/{victim['map_index']}/tries",
    )["task_instances"]
    assert any(h["state"] == "failed" for h in history if h["try_number"] < ti["try_number"]), history

    with session_scope(app_settings) as s:
        after = {
            "repositories": s.scalar(select(func.count(Repository.id))),
            "snapshots": s.scalar(select(func.count(Snapshot.id))),
            "files": s.scalar(select(func.count(File.id))),
            "kept": s.scalar(select(func.count(File.id)).where(File.kept.is_(True))),
        }
        distinct = s.scalar(select(func.count(func.distinct(File.snapshot_id.concat(File.path)))))
    assert after == before, "re-curating (with a killed try) must not add or drop rows"
    assert distinct == after["files"]
    # the run's F1 shards hold each kept file once
    published = [
        t
        for t in cluster.task_instances(CURATE, run_id)
        if t["task_id"] == "publish" and t["state"] == "success"
    ]
    assert len(published) == 2
    store = open_store(app_settings)
    keys = [o.key for o in store.list("f1/") if o.key.endswith(".parquet")]
    rows: list[tuple[str, str]] = []
    per_key = {}
    for key in keys:
        table = read_shard(store, key)
        pairs = list(
            zip(table.column("repository").to_pylist(), table.column("path").to_pylist(), strict=True)
        )
        per_key[key] = (len(pairs), len(set(pairs)), len(set(table.column("sha256").to_pylist())))
        rows += pairs
    assert len(rows) == len(set(rows)), (
        f"duplicate F1 rows (rows, distinct, distinct sha) per shard: {per_key}"
    )
    assert len(extra["kept_like"]) == 40


def test_backfill_three_intervals(cluster, app_settings, fake_github) -> None:
    """`POST /api/v2/backfills` over three days: three runs, each crawling its own data interval."""
    from scicodepile.db import session_scope
    from scicodepile.db.models import SearchPartition

    cluster.request("PATCH", f"/api/v2/dags/{CURATE}", {"is_paused": True})  # keep this about the crawl
    wait_for(lambda: _idle(cluster, CRAWL), 300, what="crawl idle", interval=2)
    backfill = cluster.request(
        "POST",
        "/api/v2/backfills",
        {
            "dag_id": CRAWL,
            "from_date": "2026-06-01T00:00:00Z",
            "to_date": "2026-06-03T00:00:00Z",
            "max_active_runs": 3,
            "reprocess_behavior": "none",
        },
    )
    runs = wait_for(
        lambda: (r := _runs(cluster, CRAWL, "backfill")) and len(r) >= 3 and r,
        120,
        what="three backfill runs",
    )
    for run in runs:
        _succeed(cluster, CRAWL, run["dag_run_id"])
    intervals = sorted((r["data_interval_start"], r["data_interval_end"]) for r in runs)
    assert len(runs) == 3, runs
    assert [i[0][:10] for i in intervals] == ["2026-06-01", "2026-06-02", "2026-06-03"]
    assert all(a[1] == b[0] for a, b in itertools.pairwise(intervals)), "contiguous, disjoint intervals"

    with session_scope(app_settings) as s:
        parts = s.execute(
            select(SearchPartition.window_start, SearchPartition.window_end, SearchPartition.status)
            .where(SearchPartition.field == "pushed", SearchPartition.parent_id.is_(None))
            .where(
                SearchPartition.window_start >= datetime(2026, 6, 1),
                SearchPartition.window_end <= datetime(2026, 6, 5),
            )
        ).all()
    windows = sorted({(a.isoformat()[:10], b.isoformat()[:10]) for a, b, _ in parts})
    assert windows == [
        ("2026-06-01", "2026-06-02"),
        ("2026-06-02", "2026-06-03"),
        ("2026-06-03", "2026-06-04"),
    ]
    assert all(status == "done" for *_, status in parts), parts
    searched = [e for e in fake_github.log if "pushed:2026-06-0" in str(e.get("q", ""))]
    assert searched, "the backfill runs searched the (fake) GitHub API for their windows"
    assert backfill["dag_id"] == CRAWL
