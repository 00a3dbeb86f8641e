"""docker-compose.yml validates against the Compose specification.

Two independent validators: Debian's ``docker-compose config`` (interpolates ``.env.example``,
resolves the YAML anchors and checks its schema), then the ``compose-spec`` bindings (the Compose
spec's JSON schema as strict models: unknown keys, bad durations and bad image references fail) on
the interpolated result.  No Docker engine is needed for either.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
AIRFLOW_SERVICES = {
    "airflow-init",
    "airflow-api-server",
    "airflow-scheduler",
    "airflow-dag-processor",
    "airflow-triggerer",
    "airflow-worker",
    "flower",
}
SERVICES = AIRFLOW_SERVICES | {"postgres", "redis", "minio", "minio-init"}
ONE_SHOT = {"airflow-init", "minio-init"}


def _compose(tmp_path: Path, *args: str, compose_text: str | None = None) -> subprocess.CompletedProcess:
    """Run docker-compose on a copy of the file with .env.example as its .env (as a user would)."""
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is missing: run scripts/sysdeps.sh (Debian package docker-compose)"
    (tmp_path / "docker-compose.yml").write_text(compose_text or (ROOT / "docker-compose.yml").read_text())
    shutil.copy(ROOT / ".env.example", tmp_path / ".env")
    return subprocess.run(
        [exe, *args], cwd=tmp_path, capture_output=True, text=True, timeout=120, env={"PATH": "/usr/bin:/bin"}
    )


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> str:
    proc = _compose(tmp_path_factory.mktemp("compose"), "--profile", "llm", "config")
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_docker_compose_config_lists_every_service(tmp_path: Path) -> None:
    proc = _compose(tmp_path, "--profile", "llm", "config", "--services")
    assert proc.returncode == 0, proc.stderr
    assert set(proc.stdout.split()) == SERVICES | {"tgi"}


def test_tgi_is_optional(rendered: str) -> None:
    """TGI starts only with `--profile llm`; every other service has no profile (always starts)."""
    services = yaml.safe_load(rendered)["services"]
    assert services["tgi"]["profiles"] == ["llm"]
    assert all(not svc.get("profiles") for name, svc in services.items() if name != "tgi")


def test_compose_spec_models_accept_the_interpolated_file(rendered: str) -> None:
    from compose_spec import PyCompose

    compose = PyCompose.from_yaml(rendered)
    compose.validate()
    assert set(compose.service_names()) == SERVICES | {"tgi"}
    assert set(compose.volumes or {}) >= {"postgres-data", "redis-data", "minio-data", "airflow-logs"}


def test_healthchecks_dependencies_and_volumes(rendered: str) -> None:
    doc = yaml.safe_load(rendered)
    services = doc["services"]
    for name, svc in services.items():
        if name in ONE_SHOT:
            assert svc.get("restart") == "no", name
            continue
        check = svc.get("healthcheck")
        assert check and check.get("test"), f"{name} has no healthcheck"
        assert check.get("interval") and check.get("retries"), name
    for name in AIRFLOW_SERVICES - {"airflow-init"}:
        depends = services[name]["depends_on"]
        assert depends["airflow-init"]["condition"] == "service_completed_successfully", name
        assert depends["postgres"]["condition"] == "service_healthy", name
    assert (
        services["airflow-init"]["depends_on"]["minio-init"]["condition"] == "service_completed_successfully"
    )
    named = {v.split(":")[0] for svc in services.values() for v in svc.get("volumes", [])}
    assert {"postgres-data", "redis-data", "minio-data", "airflow-logs", "tgi-models"} <= named
    assert set(yaml.safe_load(rendered)["volumes"]) >= named
    # every Airflow component talks to the same metadata database and broker, with the same JWT secret
    envs = [services[n]["environment"] for n in AIRFLOW_SERVICES]
    for key in (
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN",
        "AIRFLOW__CELERY__BROKER_URL",
        "AIRFLOW__API_AUTH__JWT_SECRET",
    ):
        assert len({e[key] for e in envs}) == 1, key
    assert envs[0]["AIRFLOW__CORE__EXECUTOR"] == "CeleryExecutor"


def test_worker_scales_and_tgi_reserves_a_gpu(rendered: str) -> None:
    services = yaml.safe_load(rendered)["services"]
    worker = services["airflow-worker"]
    # `--scale airflow-worker=N` needs no fixed container name and no host port
    assert "container_name" not in worker and not worker.get("ports")
    assert int(worker["deploy"]["replicas"]) >= 1
    assert "celery" in " ".join(worker["command"])
    devices = services["tgi"]["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"] and devices[0]["driver"] == "nvidia"


def test_an_invalid_file_is_rejected(tmp_path: Path, rendered: str) -> None:
    """The validators can fail: a misspelt healthcheck key and a scaled service with a fixed name."""
    from compose_spec import PyCompose

    with pytest.raises(ValueError, match="intervall"):
        PyCompose.from_yaml(rendered.replace("interval:", "intervall:", 1)).validate()
    broken = (ROOT / "docker-compose.yml").read_text().replace("healthcheck:", "healthcheks:", 1)
    proc = _compose(tmp_path, "config", compose_text=broken)
    assert proc.returncode != 0 and "healthcheks" in proc.stderr
