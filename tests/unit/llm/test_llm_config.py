"""Configuration: no endpoint means a clear error naming the setting; roles; bad URLs; no schema."""

from __future__ import annotations

from pathlib import Path

import pytest

from scicodepile.db import migrate
from scicodepile.errors import ConfigError
from scicodepile.llm import LLMNotConfigured, get_llm, llm_configured
from scicodepile.settings import load_settings


def test_no_endpoint_means_not_configured_and_a_clear_error(tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path)
    assert llm_configured(settings) is False
    with pytest.raises(LLMNotConfigured) as info:
        get_llm(settings)
    assert isinstance(info.value, ConfigError)
    assert info.value.setting == "SCICODEPILE_LLM_ENDPOINTS"
    assert "SCICODEPILE_LLM_ENDPOINTS" in str(info.value)
    with pytest.raises(LLMNotConfigured):
        get_llm(settings, role="judge")


def test_endpoints_come_from_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SCICODEPILE_LLM_ENDPOINTS", " http://a:1 , http://b:2 ")
    monkeypatch.setenv("SCICODEPILE_LLM_API_KEY", "hf_secret")
    settings = load_settings(var_dir=tmp_path)
    assert llm_configured(settings)
    assert "hf_secret" not in repr(settings) + str(settings.public_dict())


def test_a_url_without_scheme_is_a_config_error(tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path, llm_endpoints="localhost:8080")
    with pytest.raises(ConfigError, match="not an http"):
        get_llm(settings)


def test_unknown_role_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown LLM role"):
        get_llm(load_settings(var_dir=tmp_path, llm_endpoints="http://a:1"), role="critic")  # type: ignore[arg-type]


def test_an_unmigrated_database_is_a_clear_error(tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path, llm_endpoints="http://127.0.0.1:9")
    with pytest.raises(ConfigError, match="db upgrade"):
        get_llm(settings)


def test_judge_falls_back_to_the_default_endpoints_and_model(tmp_path: Path) -> None:
    settings = load_settings(
        var_dir=tmp_path,
        llm_endpoints="http://127.0.0.1:9",
        llm_model="main/model",
        llm_judge_model="judge/model",
    )
    migrate(settings)
    with get_llm(settings, role="judge") as judge, get_llm(settings) as main:
        assert judge.model == "judge/model" and main.model == "main/model"
        assert judge.transport.endpoints[0].url == "http://127.0.0.1:9"
