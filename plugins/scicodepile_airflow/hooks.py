"""Airflow Connections -> typed library settings, read when a task runs (never at import).

Connections (all optional; the environment's SCICODEPILE_* settings apply where one is absent):
- ``scicodepile_db``: the application database (any SQLAlchemy URL via the connection's URI);
- ``scicodepile_s3``: host:port, login = access key, password = secret key, extra ``{"bucket": ...,
  "secure": false}``;
- ``github_default``: password = GitHub token, host = API base URL (GitHub Enterprise);
- ``tgi_default``: host = TGI endpoint URL(s), comma-separated; password = bearer token if any;
  extra ``{"model": ..., "api": "tgi" | "openai"}``;
- ``tgi_judge``: the same for the second (judge) model.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)


def _connection(conn_id: str):
    try:
        from airflow.sdk import BaseHook

        return BaseHook.get_connection(conn_id)
    except Exception:
        return None


def library_settings(**overrides: Any):
    """Settings for the library, with values from Airflow Connections where they exist."""
    from scicodepile.settings import load_settings

    values: dict[str, Any] = {}
    if (db := _connection("scicodepile_db")) is not None:
        values["database_url"] = db.get_uri()
    if (s3 := _connection("scicodepile_s3")) is not None:
        extra = s3.extra_dejson or {}
        values.update(
            store_backend="s3",
            s3_endpoint=f"{s3.host}:{s3.port}" if s3.port else s3.host,
            s3_access_key=s3.login or "",
            s3_secret_key=s3.password or "",
        )
        if "bucket" in extra:
            values["s3_bucket"] = extra["bucket"]
        if "secure" in extra:
            values["s3_secure"] = bool(extra["secure"])
    if (gh := _connection("github_default")) is not None:
        if gh.password:
            values["github_token"] = gh.password
        if gh.host:
            values["github_api_url"] = gh.host
    for conn_id, prefix in (("tgi_default", "llm"), ("tgi_judge", "llm_judge")):
        if (llm := _connection(conn_id)) is None:
            continue
        extra = llm.extra_dejson or {}
        if llm.host:
            values[f"{prefix}_endpoints"] = _endpoint_urls(llm)
        if extra.get("model"):
            values[f"{prefix}_model"] = extra["model"]
        if extra.get("api"):
            values[f"{prefix}_api"] = extra["api"]
        if prefix == "llm" and llm.password:
            values["llm_api_key"] = llm.password
    values.update(overrides)
    return load_settings(**values)


def _endpoint_urls(conn: Any) -> str:
    """``host`` may hold one URL, several comma-separated URLs, or a bare host with ``port``/schema."""
    host = conn.host.strip()
    if "://" in host or "," in host:
        return host
    scheme = conn.schema or "http"
    return f"{scheme}://{host}:{conn.port}" if conn.port else f"{scheme}://{host}"
