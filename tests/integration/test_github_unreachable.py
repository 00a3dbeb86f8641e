"""An unreachable GitHub API is a configuration fault named at once, not hours of per-partition retries."""

from __future__ import annotations

import time

import pytest

from scicodepile.errors import ConfigError
from scicodepile.sources.github import GitHubClient
from tests.support.services import free_port


def test_unreachable_api_names_the_setting(local_settings) -> None:
    settings = local_settings.model_copy(
        update={"github_api_url": f"http://127.0.0.1:{free_port()}", "github_backoff_s": 0.01}
    )
    client = GitHubClient(settings)
    start = time.monotonic()
    try:
        with pytest.raises(ConfigError, match="SCICODEPILE_GITHUB_API_URL") as info:
            client.prime()
    finally:
        client.close()
    assert "unreachable" in str(info.value)
    assert time.monotonic() - start < 30
