"""Real Airflow 3 components for tests: API server, scheduler, DAG processor, Celery worker.

Each component is a real ``airflow ...`` process in its own session (process group), with its log
under the test's tmp dir.  ``AirflowCluster.close()`` kills every group it started (SIGTERM, then
SIGKILL), and is always called from a ``finally`` / fixture teardown, so nothing outlives a test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.services import free_port, wait_for_port

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
JWT_SECRET = "e2e-test-jwt-secret-" + os.urandom(6).hex()


def airflow_env(
    home: Path,
    *,
    metadata_url: str,
    api_port: int,
    executor: str = "CeleryExecutor",
    broker_url: str | None = None,
    app_env: dict[str, str] | None = None,
) -> dict[str, str]:
    """The environment every component shares (what docker-compose sets for a deployment)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIRFLOW", "SCICODEPILE_"))}
    env.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(ROOT / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(ROOT / "plugins"),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__UNIT_TEST_MODE": "False",
            "AIRFLOW__CORE__EXECUTOR": executor,
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{api_port}/execution/",
            "AIRFLOW__API__BASE_URL": f"http://127.0.0.1:{api_port}",
            "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": metadata_url,
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
            # a lost worker is noticed after 20 s instead of 5 min, so its task is retried quickly
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "20",
            "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT_DETECTION_INTERVAL": "5",
            "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
            "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
            "AIRFLOW__API__WORKERS": "1",
            "PYTHONPATH": f"{ROOT / 'include'}:{ROOT / 'plugins'}",
            "PATH": f"{VENV_BIN}:{env.get('PATH', '/usr/bin:/bin')}",
        }
    )
    if broker_url:
        result_backend = "db+" + metadata_url.replace("postgresql+psycopg2://", "postgresql://")
        env.update(
            {
                "AIRFLOW__CELERY__BROKER_URL": broker_url,
                "AIRFLOW__CELERY__RESULT_BACKEND": result_backend,
                "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
            }
        )
    env.update(app_env or {})
    return env


@dataclass
class AirflowCluster:
    """A set of running Airflow components sharing one environment."""

    home: Path
    env: dict[str, str]
    api_port: int
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    _token: str | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def log_path(self, name: str) -> Path:
        return self.home / f"{name}.log"

    # -------------------------------------------------------------------------- processes
    def cli(self, *args: str, timeout: float = 300, check: bool = True) -> subprocess.CompletedProcess:
        """Run one ``airflow`` CLI command to completion (migrations, pools, connections)."""
        proc = subprocess.run(
            ["airflow", *args], env=self.env, capture_output=True, text=True, timeout=timeout, cwd=self.home
        )
        if check and proc.returncode != 0:
            out = f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
            raise RuntimeError(f"airflow {' '.join(args)} failed:\n{out}")
        return proc

    def start(self, name: str, *args: str) -> subprocess.Popen:
        """Start ``airflow <args>`` in its own process group, logging to ``<home>/<name>.log``."""
        log = open(self.log_path(name), "ab")
        proc = subprocess.Popen(
            ["airflow", *args],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.home,
            start_new_session=True,
        )
        log.close()
        self.procs[name] = proc
        return proc

    def kill(self, name: str, sig: int = signal.SIGTERM, timeout: float = 30) -> None:
        """Signal the whole process group of a component and wait for it."""
        proc = self.procs.pop(name, None)
        if proc is None:
            return
        for s in (sig, signal.SIGKILL):
            try:
                os.killpg(proc.pid, s)
            except ProcessLookupError:
                break
            try:
                proc.wait(timeout=timeout if s != signal.SIGKILL else 30)
                break
            except subprocess.TimeoutExpired:
                continue
        # children that left the group (none expected) are still ours: reap stragglers of the group
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        for name in list(self.procs):
            self.kill(name)

    def assert_alive(self) -> None:
        for name, proc in self.procs.items():
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n{self.tail(name)}")

    def tail(self, name: str, n: int = 4000) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace")[-n:] if path.exists() else "(no log)"

    # --------------------------------------------------------------------------- REST API
    def wait_api(self, timeout: float = 120) -> None:
        wait_for_port("127.0.0.1", self.api_port, timeout)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assert_alive()
            try:
                self.request("GET", "/api/v2/monitor/health", auth=False)
                return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                time.sleep(1)
        raise TimeoutError(f"API server not healthy after {timeout}s:\n{self.tail('api-server')}")

    def token(self) -> str:
        """``GET /auth/token`` (simple auth manager, all admins): what the UI does on load."""
        if self._token is None:
            self._token = self.request("GET", "/auth/token", auth=False)["access_token"]
        return self._token

    def request(self, method: str, path: str, body: Any = None, *, auth: bool = True) -> Any:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if auth:
            headers["Authorization"] = f"Bearer {self.token()}"
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base_url + path, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            raise RuntimeError(f"{method} {path} -> {exc.code}: {exc.read()[:2000]!r}") from None
        return json.loads(raw) if raw else None

    def wait_dag_parsed(self, dag_ids: list[str], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            self.assert_alive()
            dags = {d["dag_id"] for d in self.request("GET", "/api/v2/dags?limit=100")["dags"]}
            if set(dag_ids) <= dags:
                return
            time.sleep(2)
        errors = self.request("GET", "/api/v2/importErrors")
        raise TimeoutError(f"DAGs {dag_ids} not parsed after {timeout}s; import errors: {errors}")

    def unpause(self, dag_id: str) -> None:
        self.request("PATCH", f"/api/v2/dags/{dag_id}", {"is_paused": False})

    def trigger(self, dag_id: str, conf: dict[str, Any] | None = None) -> str:
        """Trigger a run as the UI's trigger form does; return its run id."""
        run = self.request(
            "POST", f"/api/v2/dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf or {}}
        )
        return run["dag_run_id"]

    def run_state(self, dag_id: str, run_id: str) -> str:
        return self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")["state"]

    def task_instances(self, dag_id: str, run_id: str) -> list[dict[str, Any]]:
        return self.request("GET", f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances?limit=1000")[
            "task_instances"
        ]

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 240) -> str:
        """Wait until the run finishes; fail with task states and logs when it does not succeed."""
        return wait_for(
            lambda: (s := self.run_state(dag_id, run_id)) in ("success", "failed") and s,
            timeout,
            what=f"{dag_id} {run_id}",
            on_timeout=lambda: self.describe(dag_id, run_id),
            check=self.assert_alive,
        )

    def describe(self, dag_id: str, run_id: str) -> str:
        tis = self.task_instances(dag_id, run_id)
        lines = [f"{t['task_id']}[{t.get('map_index')}] {t['state']} try {t.get('try_number')}" for t in tis]
        return (
            "\n".join(lines)
            + "\n--- scheduler ---\n"
            + self.tail("scheduler", 2500)
            + ("\n--- worker ---\n" + self.tail("worker", 2500))
        )

    def task_log(self, dag_id: str, run_id: str, task_id: str, try_number: int, map_index: int = -1) -> str:
        path = (
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/logs/{try_number}"
            f"?map_index={map_index}&full_content=true"
        )
        try:
            return json.dumps(self.request("GET", path))[-4000:]
        except RuntimeError as exc:
            return str(exc)


def wait_for(
    predicate: Callable[[], Any],
    timeout: float,
    *,
    what: str,
    interval: float = 1.0,
    on_timeout: Callable[[], str] | None = None,
    check: Callable[[], None] | None = None,
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check:
            check()
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    detail = on_timeout() if on_timeout else ""
    raise TimeoutError(f"{what}: not done after {timeout}s\n{detail}")


def start_cluster(
    home: Path,
    *,
    metadata_url: str,
    broker_url: str | None,
    app_env: dict[str, str],
    components: tuple[str, ...] = ("api-server", "scheduler", "dag-processor", "worker"),
    executor: str = "CeleryExecutor",
) -> AirflowCluster:
    """Migrate the metadata database, create the pools, start the components, wait for the API."""
    home.mkdir(parents=True, exist_ok=True)
    port = free_port()
    env = airflow_env(
        home,
        metadata_url=metadata_url,
        api_port=port,
        broker_url=broker_url,
        app_env=app_env,
        executor=executor,
    )
    cluster = AirflowCluster(home=home, env=env, api_port=port)
    try:
        cluster.cli("db", "migrate", timeout=600)
        from scicodepile_airflow.defaults import POOLS

        for name, (slots, description) in POOLS.items():
            cluster.cli("pools", "set", name, str(slots), description)
        commands = {
            "api-server": ("api-server", "--port", str(port), "--host", "127.0.0.1"),
            "scheduler": ("scheduler",),
            "dag-processor": ("dag-processor",),
            "triggerer": ("triggerer",),
            "worker": ("celery", "worker", "--concurrency", "2", "--without-mingle", "--without-gossip"),
        }
        for name in components:
            cluster.start(name, *commands[name])
        cluster.wait_api()
    except BaseException:
        cluster.close()
        raise
    return cluster
