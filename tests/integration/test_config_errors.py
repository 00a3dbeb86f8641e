"""Bad configuration gives one clear line naming the setting to fix, never a traceback wall."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.services import free_port

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _cli(args: list[str], env_extra: dict[str, str], tmp_path: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCICODEPILE_")}
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT / "include")
    return subprocess.run(
        [sys.executable, "-m", "scicodepile.cli", *args, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=tmp_path,
    )


def _one_clear_line(proc: subprocess.CompletedProcess, setting: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ") and setting in lines[0], lines[0]
    assert "Traceback" not in proc.stderr


def test_wrong_database_url(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    proc = _cli(
        ["check"],
        {"SCICODEPILE_DATABASE_URL": f"postgresql+psycopg2://postgres:hunter2@127.0.0.1:{port}/nope"},
        tmp_path,
    )
    _one_clear_line(proc, "SCICODEPILE_DATABASE_URL")
    assert "hunter2" not in proc.stderr  # the password never shows


def test_garbage_database_url(tmp_path: Path) -> None:
    proc = _cli(["check"], {"SCICODEPILE_DATABASE_URL": "not a url at all"}, tmp_path)
    _one_clear_line(proc, "SCICODEPILE_DATABASE_URL")


def test_missing_database_on_real_postgres(tmp_path: Path) -> None:
    proc = _cli(
        ["check"],
        {"SCICODEPILE_DATABASE_URL": "postgresql+psycopg2://postgres@127.0.0.1:5432/no_such_db_scicodepile"},
        tmp_path,
    )
    _one_clear_line(proc, "SCICODEPILE_DATABASE_URL")


def test_unreachable_s3_endpoint(tmp_path: Path) -> None:
    proc = _cli(
        ["check"],
        {
            "SCICODEPILE_STORE_BACKEND": "s3",
            "SCICODEPILE_S3_ENDPOINT": f"127.0.0.1:{free_port()}",
            "SCICODEPILE_S3_SECRET_KEY": "topsecret",
        },
        tmp_path,
    )
    _one_clear_line(proc, "SCICODEPILE_S3_ENDPOINT")
    assert "topsecret" not in proc.stderr


def test_missing_bucket(tmp_path: Path, s3_server) -> None:
    proc = _cli(
        ["check"],
        {
            "SCICODEPILE_STORE_BACKEND": "s3",
            "SCICODEPILE_S3_ENDPOINT": s3_server.endpoint,
            "SCICODEPILE_S3_BUCKET": "does-not-exist",
        },
        tmp_path,
    )
    _one_clear_line(proc, "SCICODEPILE_S3_BUCKET")


def test_invalid_setting_value(tmp_path: Path) -> None:
    proc = _cli(["check"], {"SCICODEPILE_NUM_SHARDS": "many"}, tmp_path)
    _one_clear_line(proc, "SCICODEPILE_NUM_SHARDS")


def test_check_passes_on_embedded_defaults(tmp_path: Path) -> None:
    proc = _cli(["check"], {}, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "database ok" in proc.stdout and "object store ok" in proc.stdout
