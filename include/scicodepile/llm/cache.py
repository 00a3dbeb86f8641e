"""The response cache: the ``llm_cache`` table, with large answers in the object store.

The key is a sha256 over (model, prompt version, rendered prompt, parameters), so a rerun or a retried
Airflow task finds every answer it already paid for, including rejected ones (status ``rejected``: a
rerun does not pay again for garbage).  Answers larger than ``llm_cache_inline_bytes`` are written to
``store/keys.llm_payload_key(cache_key)`` first and the row points at them, so a row never refers to a
missing object.  Rejections also go to the ``rejections`` table (stage ``llm``) with the raw text.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import inspect, select

from scicodepile.db import record_rejection, session_scope, upsert
from scicodepile.db.models import LLMCacheEntry
from scicodepile.db.session import get_engine
from scicodepile.errors import ConfigError
from scicodepile.settings import Settings
from scicodepile.store.keys import llm_payload_key


def cache_key(model: str, prompt_version: str, prompt: str, parameters: dict[str, Any]) -> str:
    """sha256 of the canonical JSON of everything that determines the answer."""
    material = json.dumps(
        {"model": model, "prompt_version": prompt_version, "prompt": prompt, "parameters": parameters},
        sort_keys=True,
        ensure_ascii=False,
        separators=(",", ":"),
    )
    return hashlib.sha256(material.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class CachedAnswer:
    """A row of ``llm_cache``, with the large payload (if any) already fetched."""

    status: str
    raw: str | None
    parsed: dict[str, Any] | None
    error: str | None
    attempts: int


class LLMCache:
    """Read and write cached answers (thread-safe: one short transaction per call)."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.enabled = settings.llm_cache
        self._store = None
        self._lock = threading.Lock()
        if not inspect(get_engine(settings)).has_table("llm_cache"):
            raise ConfigError(
                "the application database has no llm_cache table: run `scicodepile db upgrade`",
                setting="SCICODEPILE_DATABASE_URL",
            )

    def _object_store(self):
        with self._lock:
            if self._store is None:
                from scicodepile.store import open_store

                self._store = open_store(self.settings)
            return self._store

    def get_many(self, keys: Iterable[str]) -> dict[str, CachedAnswer]:
        """Cached answers for those of ``keys`` that have one."""
        keys = list(dict.fromkeys(keys))
        if not self.enabled or not keys:
            return {}
        found: dict[str, CachedAnswer] = {}
        with session_scope(self.settings) as session:
            for start in range(0, len(keys), 500):
                rows = session.scalars(
                    select(LLMCacheEntry).where(LLMCacheEntry.cache_key.in_(keys[start : start + 500]))
                )
                for row in rows:
                    raw, parsed = row.response, row.parsed
                    if row.response_key:
                        payload = json.loads(self._object_store().get_bytes(row.response_key))
                        raw = payload.get("raw")
                        parsed = parsed if parsed is not None else payload.get("parsed")
                    found[row.cache_key] = CachedAnswer(row.status, raw, parsed, row.error, row.attempts)
        return found

    def put(
        self,
        key: str,
        *,
        model: str,
        prompt_version: str,
        status: str,
        raw: str | None,
        parsed: dict[str, Any] | None,
        error: str | None,
        attempts: int,
        prompt_tokens: int | None = None,
        completion_tokens: int | None = None,
        reason: str | None = None,
    ) -> None:
        """Store one answer (an upsert: a retried task writing the same key is harmless)."""
        inline_limit = self.settings.llm_cache_inline_bytes
        response, response_key, parsed_inline = raw, None, parsed
        if self.enabled and raw is not None and len(raw.encode("utf-8", "surrogatepass")) > inline_limit:
            response_key = llm_payload_key(key)
            payload = json.dumps({"raw": raw, "parsed": parsed}, ensure_ascii=False).encode()
            self._object_store().put_bytes(response_key, payload, "application/json")
            response = None
            if parsed is not None and len(json.dumps(parsed)) > inline_limit:
                parsed_inline = None
        with session_scope(self.settings) as session:
            if self.enabled:
                upsert(
                    session,
                    LLMCacheEntry,
                    [
                        {
                            "cache_key": key,
                            "model": model[:256],
                            "prompt_version": prompt_version[:64],
                            "status": status,
                            "response": response,
                            "response_key": response_key,
                            "parsed": parsed_inline,
                            "error": error,
                            "attempts": attempts,
                            "prompt_tokens": prompt_tokens,
                            "completion_tokens": completion_tokens,
                        }
                    ],
                    keys=["cache_key"],
                )
            if status == "rejected":
                record_rejection(
                    session,
                    "llm",
                    "llm_call",
                    key,
                    reason or "llm_rejected",
                    f"model={model} prompt={prompt_version} attempts={attempts}: {error}\n"
                    f"raw answer: {(raw or '')[:3000]}",
                )
