"""Airflow Connections become typed library settings when a task runs (env-var connections here)."""

from __future__ import annotations

import json

import pytest


def test_connections_map_to_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_TGI_DEFAULT",
        json.dumps(
            {
                "conn_type": "http",
                "host": "http://tgi-a:80,http://tgi-b:80",
                "password": "tok-llm",
                "extra": {"model": "bigcode/starcoder2-3b", "api": "openai"},
            }
        ),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_TGI_JUDGE",
        json.dumps({"conn_type": "http", "host": "judge", "port": 8080, "extra": {"model": "judge/m"}}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_GITHUB_DEFAULT",
        json.dumps({"conn_type": "http", "host": "https://ghe.example/api/v3", "password": "ghp_tok"}),
    )
    monkeypatch.setenv(
        "AIRFLOW_CONN_SCICODEPILE_S3",
        json.dumps(
            {
                "conn_type": "aws",
                "host": "minio",
                "port": 9000,
                "login": "ak",
                "password": "s3-secret-key",
                "extra": {"bucket": "corpus", "secure": False},
            }
        ),
    )
    from scicodepile_airflow.hooks import library_settings

    s = library_settings()
    assert s.llm_endpoints == "http://tgi-a:80,http://tgi-b:80"
    assert s.llm_model == "bigcode/starcoder2-3b" and s.llm_api == "openai"
    assert s.llm_api_key.get_secret_value() == "tok-llm"
    assert s.llm_judge_endpoints == "http://judge:8080" and s.llm_judge_model == "judge/m"
    assert s.github_api_url == "https://ghe.example/api/v3" and s.github_token.get_secret_value() == "ghp_tok"
    assert (s.store_backend, s.s3_endpoint, s.s3_bucket) == ("s3", "minio:9000", "corpus")
    for secret in ("tok-llm", "ghp_tok", "s3-secret-key"):
        assert secret not in repr(s)


def test_without_connections_the_environment_applies(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCICODEPILE_NUM_SHARDS", "7")
    from scicodepile_airflow.hooks import library_settings

    s = library_settings()
    assert s.num_shards == 7 and s.llm_endpoints == "" and s.store_backend == "local"
