"""The LLM client stages use: prompt in, validated pydantic object (or a recorded rejection) out.

Why plain ``httpx`` and not a vendor client: the ``text-generation`` client (0.7.0) pins
``huggingface_hub<1.0`` and has neither retries, backoff nor a concurrency bound; ``huggingface_hub``'s
``InferenceClient`` speaks both TGI routes but hides status codes behind its own exceptions, retries
only on 503 while a model loads, and knows nothing of ``/info``'s ``max_concurrent_requests``.  What
this layer must get right is exactly that (backpressure, 429/503/drop retries, a total deadline), and
the two wire formats are a few lines each (:mod:`scicodepile.llm.backends`), so one pooled, pinned
``httpx.Client`` (already a dependency) with our own retry loop is the smaller and more honest choice.

The API is synchronous, as stages are; :meth:`LLMClient.structured_many` fans out over a thread pool
sized to twice the endpoints' capacity, enough to keep a TGI server's batch full while answers are
validated and cached; the transport, not the pool, bounds the requests in flight.
"""

from __future__ import annotations

import functools
import json
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel

from scicodepile.errors import ConfigError
from scicodepile.llm.backends import BACKENDS, Turn
from scicodepile.llm.cache import BatchWriter, CachedAnswer, CacheEntry, LLMCache, cache_key
from scicodepile.llm.templates import PromptTemplate, load_prompt
from scicodepile.llm.transport import LLMRequestRejected, Transport
from scicodepile.llm.validate import check_answer
from scicodepile.settings import Settings

log = logging.getLogger("scicodepile.llm")

ENDPOINTS_SETTING = "SCICODEPILE_LLM_ENDPOINTS"


class LLMNotConfigured(ConfigError):
    """An LLM call was asked for, but no endpoint is configured (``SCICODEPILE_LLM_ENDPOINTS``)."""

    def __init__(self, role: str = "default") -> None:
        which = "the judge model" if role == "judge" else "an LLM"
        super().__init__(
            f"{which} is needed but no LLM endpoint is configured: set {ENDPOINTS_SETTING} "
            "(comma-separated base URLs of TGI or OpenAI-compatible servers); stages that have a "
            "non-LLM fallback use it when the setting is empty",
            setting=ENDPOINTS_SETTING,
        )


@dataclass
class LLMResult:
    """One structured call's outcome; ``ok`` False means ``rejection_reason`` says why, ``raw`` kept."""

    ok: bool
    value: BaseModel | None
    raw: str | None
    rejection_reason: str | None
    model: str
    prompt_version: str
    cache_key: str
    cached: bool
    attempts: int = 0
    rejection_detail: str | None = None


@functools.lru_cache(maxsize=128)
def _json_schema(schema: type[BaseModel]) -> dict[str, Any]:
    """The JSON schema of a pydantic model (computed once per model class)."""
    return schema.model_json_schema()


def llm_configured(settings: Settings) -> bool:
    """True when ``settings.llm_endpoints`` names at least one server."""
    return bool(_split(settings.llm_endpoints))


def _split(value: str) -> list[str]:
    return [u.strip() for u in (value or "").split(",") if u.strip()]


def get_llm(settings: Settings, role: Literal["default", "judge"] = "default") -> LLMClient:
    """A client for ``role``; raises :class:`LLMNotConfigured` when no endpoint is set.

    ``judge`` is a second model for verification: ``llm_judge_endpoints`` / ``llm_judge_model`` /
    ``llm_judge_api``, each falling back to the default model's setting when empty.
    """
    if role == "default":
        urls, model, api, setting = (
            _split(settings.llm_endpoints),
            settings.llm_model,
            settings.llm_api,
            ENDPOINTS_SETTING,
        )
    elif role == "judge":
        judge_urls = _split(settings.llm_judge_endpoints)
        urls = judge_urls or _split(settings.llm_endpoints)
        model = settings.llm_judge_model or ("" if judge_urls else settings.llm_model)
        api = settings.llm_judge_api or settings.llm_api
        setting = "SCICODEPILE_LLM_JUDGE_ENDPOINTS" if judge_urls else ENDPOINTS_SETTING
    else:
        raise ValueError(f"unknown LLM role {role!r} (default | judge)")
    if not urls:
        raise LLMNotConfigured(role)
    for url in urls:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"LLM endpoint {url!r} is not an http(s) URL", setting=setting)
    return LLMClient(settings, urls=urls, model=model, api=api, role=role, setting=setting)


class LLMClient:
    """Structured calls against one model served by one or more endpoints, with a response cache."""

    def __init__(
        self,
        settings: Settings,
        *,
        urls: list[str],
        model: str,
        api: str,
        role: str = "default",
        setting: str = ENDPOINTS_SETTING,
    ) -> None:
        self.settings = settings
        self.role = role
        self.backend = BACKENDS[api]()
        self.transport = Transport(
            urls,
            self.backend,
            max_concurrency=settings.llm_max_concurrency,
            request_timeout=settings.llm_request_timeout_s,
            max_retries=settings.llm_max_retries,
            backoff_base=settings.llm_backoff_base_s,
            backoff_max=settings.llm_backoff_max_s,
            api_key=settings.llm_api_key.get_secret_value(),
            setting=setting,
        )
        self.cache = LLMCache(settings)
        self._model = model
        self._lock = threading.Lock()
        self._templates: dict[str, PromptTemplate] = {}

    # -- identity -------------------------------------------------------------------------
    @property
    def model(self) -> str:
        """The configured model id, or the one the server reports (asked once, no generation)."""
        with self._lock:
            if not self._model:
                reported = self.transport.model_id()
                if not reported:
                    raise ConfigError(
                        "no model configured and the LLM server did not say which model it serves",
                        setting="SCICODEPILE_LLM_MODEL",
                    )
                self._model = reported
            return self._model

    def template(self, name: str) -> PromptTemplate:
        """The prompt template ``name`` (loaded once per client)."""
        if name not in self._templates:
            self._templates[name] = load_prompt(name)
        return self._templates[name]

    def _parameters(self, schema: type[BaseModel], max_new_tokens: int, temperature: float) -> dict[str, Any]:
        return {
            "api": self.backend.name,
            "max_new_tokens": max_new_tokens,
            "temperature": temperature,
            "schema": _json_schema(schema),
        }

    # -- public calls -----------------------------------------------------------------------
    def structured(
        self,
        prompt: str,
        variables: dict[str, Any],
        schema: type[BaseModel],
        max_new_tokens: int = 512,
        *,
        temperature: float | None = None,
    ) -> LLMResult:
        """Render ``prompt`` with ``variables``, ask the model for a ``schema`` object, validate it.

        A cached answer costs no call.  An invalid answer is re-asked up to ``llm_max_reasks`` times,
        then cached and recorded as a rejection with its raw text.  Raises ``LLMUnavailable`` when the
        servers give no answer within ``llm_deadline_s``.
        """
        return self.structured_many(prompt, [variables], schema, max_new_tokens, temperature=temperature)[0]

    def structured_many(
        self,
        prompt: str,
        variables: Sequence[dict[str, Any]],
        schema: type[BaseModel],
        max_new_tokens: int = 512,
        *,
        temperature: float | None = None,
    ) -> list[LLMResult]:
        """:meth:`structured` for many inputs at once, concurrently, results in input order.

        Cache hits are read in one query; identical prompts are asked once.  If a call fails with
        ``LLMUnavailable`` (or a configuration error), no new call starts, the ones in flight finish
        and are cached, then the first error is raised: a retried task pays only for what is missing.
        """
        template = self.template(prompt)
        temp = self.settings.llm_temperature if temperature is None else temperature
        params = self._parameters(schema, max_new_tokens, temp)
        model = self.model
        rendered = [template.render(v) for v in variables]
        keys = [cache_key(model, template.prompt_version, text, params) for text in rendered]
        hits = self.cache.get_many(keys)
        results: dict[str, LLMResult] = {
            key: self._from_cache(key, hit, schema, model, template.prompt_version)
            for key, hit in hits.items()
        }
        todo = {key: text for key, text in zip(keys, rendered, strict=True) if key not in results}
        if todo:
            errors: list[BaseException] = []
            # More threads than server slots: while one thread validates and writes the cache, another
            # already holds its slot, so the server's batch stays full (the transport bounds in-flight).
            self.transport.probe()
            workers = max(1, min(len(todo), 2 * self.transport.capacity, 512))

            writer = BatchWriter(self.cache) if len(todo) > 1 else None
            sink = writer.submit if writer else self.cache.put

            def one(item: tuple[str, str]) -> None:
                key, text = item
                if errors:  # fail fast: once the server is gone, do not start the remaining items
                    return
                try:
                    results[key] = self._ask(key, text, schema, max_new_tokens, temp, model, template, sink)
                except BaseException as exc:
                    errors.append(exc)

            try:
                if workers == 1:
                    for item in todo.items():
                        one(item)
                else:
                    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="llm") as pool:
                        list(pool.map(one, todo.items()))
            finally:
                if writer:
                    writer.close()  # every answer that arrived is cached before anything is raised
            if errors:
                raise errors[0]
        return [results[key] for key in keys]

    def close(self) -> None:
        """Close pooled connections."""
        self.transport.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals --------------------------------------------------------------------------
    def _from_cache(
        self, key: str, hit: CachedAnswer, schema: type[BaseModel], model: str, prompt_version: str
    ) -> LLMResult:
        if hit.status == "ok" and hit.parsed is not None:
            verdict = check_answer(json.dumps(hit.parsed), schema)
            if verdict.value is not None:
                return LLMResult(
                    True, verdict.value, hit.raw, None, model, prompt_version, key, True, hit.attempts
                )
        reason, _, detail = (hit.error or "llm_rejected").partition(": ")
        return LLMResult(
            False, None, hit.raw, reason, model, prompt_version, key, True, hit.attempts, detail or None
        )

    def _ask(
        self,
        key: str,
        text: str,
        schema: type[BaseModel],
        max_new_tokens: int,
        temperature: float,
        model: str,
        template: PromptTemplate,
        sink: Callable[[CacheEntry], None],
    ) -> LLMResult:
        deadline = time.monotonic() + self.settings.llm_deadline_s
        json_schema = _json_schema(schema) if self.backend.supports_grammar else None
        history: list[Turn] = []
        prompt_tokens = completion_tokens = 0
        version = template.prompt_version
        raw: str | None = None
        reason = detail = None
        attempts = self.settings.llm_max_reasks + 1
        for attempt in range(1, attempts + 1):
            body = self.backend.body(
                model=model,
                prompt=text,
                history=history,
                schema=json_schema,
                max_new_tokens=max_new_tokens,
                temperature=temperature,
                seed=None if attempt == 1 else attempt,
            )
            try:
                completion = self.transport.post(body, deadline)
            except LLMRequestRejected as exc:
                # The request itself is refused (e.g. longer than the context): a per-item fault,
                # recorded but not cached, since a server with a longer context would accept it.
                reason, detail = "llm_request_rejected", str(exc)
                sink(CacheEntry(key, model, version, "refused", None, None, detail, attempt, reason=reason))
                return LLMResult(False, None, None, reason, model, version, key, False, attempt, detail)
            prompt_tokens += completion.prompt_tokens or 0
            completion_tokens += completion.completion_tokens or 0
            raw = completion.text
            verdict = check_answer(raw, schema)
            if verdict.value is not None:
                sink(
                    CacheEntry(
                        key,
                        model,
                        version,
                        "ok",
                        raw,
                        verdict.parsed,
                        None,
                        attempt,
                        prompt_tokens or None,
                        completion_tokens or None,
                    )
                )
                return LLMResult(True, verdict.value, raw, None, model, version, key, False, attempt)
            reason, detail = f"llm_{verdict.reason}", verdict.detail
            if completion.extra.get("problem"):  # a well-formed answer with nothing in it
                reason, detail = "llm_no_content", str(completion.extra["problem"])
            elif completion.finish_reason == "length":  # cut off: say so, not just "invalid JSON"
                reason = "llm_truncated"
                detail = f"the answer was cut off at max_new_tokens={max_new_tokens} ({verdict.detail})"
            log.info("invalid LLM answer (%s, attempt %d): %s", reason, attempt, detail)
            history.append(Turn(answer=raw, problem=f"{reason.removeprefix('llm_')}: {detail}"))
        sink(
            CacheEntry(
                key,
                model,
                version,
                "rejected",
                raw,
                None,
                f"{reason}: {detail}",
                attempts,
                prompt_tokens or None,
                completion_tokens or None,
                reason,
            )
        )
        return LLMResult(False, None, raw, reason, model, version, key, False, attempts, detail)
