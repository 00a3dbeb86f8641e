from __future__ import annotations

import pytest

from scicodepile.errors import ConfigError
from scicodepile.settings import load_settings, redact_url


def test_env_prefix_and_parsing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCICODEPILE_NUM_SHARDS", "30")
    assert load_settings().num_shards == 30


def test_secrets_never_in_repr_or_public_dict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCICODEPILE_GITHUB_TOKEN", "ghp_secret123")
    monkeypatch.setenv("SCICODEPILE_S3_SECRET_KEY", "s3secret456")
    monkeypatch.setenv("SCICODEPILE_DATABASE_URL", "postgresql://u:dbpass789@h/db")
    s = load_settings()
    text = repr(s) + str(s) + str(s.public_dict())
    for secret in ("ghp_secret123", "s3secret456", "dbpass789"):
        assert secret not in text
    assert s.github_token.get_secret_value() == "ghp_secret123"


def test_embedded_defaults_need_no_server(tmp_path) -> None:
    s = load_settings(var_dir=tmp_path)
    assert s.resolved_database_url.startswith("sqlite:///") and str(tmp_path) in s.resolved_database_url
    assert s.store_backend == "local" and s.resolved_store_root == (tmp_path / "objects").resolve()


def test_invalid_value_names_the_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SCICODEPILE_STORE_BACKEND", "ftp")
    with pytest.raises(ConfigError, match="SCICODEPILE_STORE_BACKEND"):
        load_settings()


def test_redact_url() -> None:
    assert redact_url("postgresql://u:pw@h:5/d") == "postgresql://u:***@h:5/d"
    assert redact_url("sqlite:///x.db") == "sqlite:///x.db"
