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
import queue
import re
import threading
from collections.abc import Iterable
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy import inspect, select

from scicodepile.db import record_rejection, session_scope, upsert
from scicodepile.db.models import LLMCacheEntry
from scicodepile.db.session import get_engine
from scicodepile.errors import ConfigError
from scicodepile.settings import Settings
from scicodepile.store.keys import llm_payload_key
from scicodepile.text import clean_opt, clean_text


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

    def put(self, entry: CacheEntry) -> None:
        """Store one answer."""
        self.put_many([entry])

    def put_many(self, entries: list[CacheEntry]) -> None:
        """Store answers in one transaction (upserts: a retried task writing the same keys is harmless).

        Status ``ok`` and ``rejected`` go to ``llm_cache``; ``rejected`` and ``refused`` (the server
        refused the request; not cached, a server with a longer context may accept it) also go to the
        ``rejections`` table.  Large answers are written to the object store before their rows.
        """
        inline_limit = self.settings.llm_cache_inline_bytes
        rows: list[dict[str, Any]] = []
        entries = [_storable(e) for e in entries]
        for e in entries:
            if not self.enabled or e.status == "refused":
                continue
            response, response_key, parsed_inline = e.raw, None, e.parsed
            if e.raw is not None and len(e.raw.encode("utf-8", "surrogatepass")) > inline_limit:
                response_key = llm_payload_key(e.key)
                payload = json.dumps({"raw": e.raw, "parsed": e.parsed}, ensure_ascii=False).encode()
                self._object_store().put_bytes(response_key, payload, "application/json")
                response = None
                if e.parsed is not None and len(json.dumps(e.parsed)) > inline_limit:
                    parsed_inline = None
            rows.append(
                {
                    "cache_key": e.key,
                    "model": e.model[:256],
                    "prompt_version": e.prompt_version[:64],
                    "status": e.status,
                    "response": response,
                    "response_key": response_key,
                    "parsed": parsed_inline,
                    "error": e.error,
                    "attempts": e.attempts,
                    "prompt_tokens": e.prompt_tokens,
                    "completion_tokens": e.completion_tokens,
                }
            )
        rejected = [e for e in entries if e.status in ("rejected", "refused")]
        if not rows and not rejected:
            return
        with session_scope(self.settings) as session:
            if rows:
                upsert(session, LLMCacheEntry, rows, keys=["cache_key"])
            for e in rejected:
                record_rejection(
                    session,
                    "llm",
                    "llm_call",
                    e.key,
                    e.reason or "llm_rejected",
                    f"model={e.model} prompt={e.prompt_version} attempts={e.attempts}: {e.error}\n"
                    f"raw answer: {(e.raw or '')[:3000]}",
                )


def _storable(entry: CacheEntry) -> CacheEntry:
    """``entry`` with NUL bytes and lone surrogates in its texts replaced by U+FFFD.

    A model (or a broken server) can answer ``\u0000`` or a lone surrogate inside valid JSON; Postgres
    text cannot hold the one and psycopg cannot encode the other, and the whole batch's transaction
    would fail.  The raw text kept for inspection is then this cleaned copy.
    """
    texts = (entry.raw, entry.error, entry.model, entry.prompt_version)
    dirty = any(t is not None and _NOT_STORABLE.search(t) for t in texts)
    if not dirty and not _unstorable_json(entry.parsed):
        return entry
    parsed = entry.parsed
    if parsed is not None:
        parsed = json.loads(clean_text(json.dumps(parsed, ensure_ascii=False)))
    return replace(
        entry,
        raw=clean_opt(entry.raw),
        error=clean_opt(entry.error),
        model=clean_text(entry.model),
        prompt_version=clean_text(entry.prompt_version),
        parsed=parsed,
    )


def _unstorable_json(value: Any) -> bool:
    return value is not None and bool(_NOT_STORABLE.search(json.dumps(value, ensure_ascii=False)))


_NOT_STORABLE = re.compile(r"[\x00\ud800-\udfff]")


@dataclass
class CacheEntry:
    """One answer to store: ``ok`` (valid), ``rejected`` (invalid after re-asks) or ``refused``."""

    key: str
    model: str
    prompt_version: str
    status: str
    raw: str | None
    parsed: dict[str, Any] | None
    error: str | None
    attempts: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reason: str | None = None


class BatchWriter:
    """Writes entries on a background thread, one transaction per batch of whatever has queued up.

    Under load, one transaction carries many answers, so the database's write lock (SQLite's above
    all) never becomes the pipeline's bottleneck.  :meth:`close` flushes and re-raises a write error.
    """

    _STOP = object()

    def __init__(self, cache: LLMCache, max_batch: int = 256) -> None:
        self.cache = cache
        self.max_batch = max_batch
        self.error: BaseException | None = None
        self._queue: queue.Queue[object] = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="llm-cache-writer", daemon=True)
        self._thread.start()

    def submit(self, entry: CacheEntry) -> None:
        if self.error is not None:
            raise self.error
        self._queue.put(entry)

    def _run(self) -> None:
        stop = False
        while not stop:
            batch: list[CacheEntry] = []
            item = self._queue.get()
            while True:
                if item is self._STOP:
                    stop = True
                else:
                    batch.append(item)  # type: ignore[arg-type]
                if stop or len(batch) >= self.max_batch:
                    break
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            if batch and self.error is None:
                try:
                    self.cache.put_many(batch)
                except BaseException as exc:
                    self.error = exc

    def close(self) -> None:
        self._queue.put(self._STOP)
        self._thread.join()
        if self.error is not None:
            raise self.error
