"""HTTP transport to one or more LLM endpoints: backpressure, retries with backoff and jitter, deadlines.

Concurrency per endpoint is bounded by ``min(settings.llm_max_concurrency, /info max_concurrent_requests)``
(TGI answers 429 "Model is overloaded" past its own bound, so staying under it avoids wasted round
trips).  When a 429 arrives anyway (other workers share the server), the endpoint's limit is halved and
then grows back by one slot per ``limit`` successes (additive increase, multiplicative decrease).
Across Airflow workers the ``llm`` pool bounds the number of tasks; this module bounds one process.

Retried: 429, 5xx (TGI's 424 "generation failed" too), timeouts and dropped or refused connections,
with exponential backoff and equal jitter (half fixed, half random), honouring ``Retry-After``, never
past the call's total deadline.  Not retried: 400/413/422 (the request itself is wrong, e.g. a prompt
longer than the model's context: :class:`LLMRequestRejected`, a per-item fault) and 401/403/404 (a
configuration fault: :class:`~scicodepile.errors.ConfigError` naming the setting).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx

from scicodepile.errors import ConfigError, SciCodePileError
from scicodepile.llm.backends import Backend, Completion, ErrorBody

log = logging.getLogger("scicodepile.llm")

RETRY_STATUS = frozenset({408, 424, 429, 500, 502, 503, 504})
REJECT_STATUS = frozenset({400, 413, 422})


class LLMUnavailable(SciCodePileError):
    """No answer within the call's deadline or retry budget (server down, overloaded, dropping).

    Raised, not recorded: it says nothing about the item, and a retried task will find every answer
    that did arrive in the cache.
    """


class LLMRequestRejected(SciCodePileError):
    """The server refused this request as invalid (400/413/422), e.g. an input longer than the context."""

    def __init__(self, status: int, message: str) -> None:
        self.status = status
        super().__init__(f"HTTP {status}: {message}")


@dataclass
class Endpoint:
    """One server: its URL, what it reported, and this process's share of it."""

    url: str
    cap: int
    limit: float
    active: int = 0
    failures: int = 0
    down_until: float = 0.0
    model_id: str | None = None
    info: dict[str, Any] | None = None

    def free(self) -> float:
        return int(self.limit) - self.active


def backoff_delay(attempt: int, base: float, cap: float, retry_after: float | None = None) -> float:
    """Exponential backoff with equal jitter: half of ``min(cap, base * 2**attempt)`` fixed, half random."""
    ceiling = min(cap, base * (2 ** min(attempt, 30)))
    delay = ceiling / 2 + random.uniform(0, ceiling / 2)
    if retry_after is not None:
        delay = max(delay, min(retry_after, cap))
    return delay


def _retry_after(response: httpx.Response) -> float | None:
    value = response.headers.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None


def _error_text(response: httpx.Response) -> str:
    try:
        data = response.json()
        if isinstance(data, dict):
            err = data.get("error")
            if isinstance(err, dict):  # OpenAI / vLLM: {"error": {"message": ...}}
                err = err.get("message")
            if err:
                return str(err)[:500]
            if data.get("message"):
                return str(data["message"])[:500]
    except ValueError:
        pass
    return response.text[:500] or response.reason_phrase


class Transport:
    """A pool of endpoints serving one model, used from many threads at once."""

    def __init__(
        self,
        urls: list[str],
        backend: Backend,
        *,
        max_concurrency: int,
        request_timeout: float,
        max_retries: int,
        backoff_base: float,
        backoff_max: float,
        api_key: str = "",
        setting: str = "SCICODEPILE_LLM_ENDPOINTS",
    ) -> None:
        self.backend = backend
        self.setting = setting
        self.max_concurrency = max_concurrency
        self.request_timeout = request_timeout
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.endpoints = [
            Endpoint(url=u.rstrip("/"), cap=max_concurrency, limit=max_concurrency) for u in urls
        ]
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.Client(
            headers=headers,
            timeout=request_timeout,
            limits=httpx.Limits(max_connections=None, max_keepalive_connections=4 * max_concurrency),
        )
        self._cond = threading.Condition()
        self._probed = False
        self.stats = {"requests": 0, "retries": 0, "overloaded": 0, "errors": 0}

    # -- discovery ------------------------------------------------------------------------
    def probe(self) -> None:
        """Ask each endpoint what it serves and how many requests it takes at once (once)."""
        with self._cond:
            if self._probed:
                return
            self._probed = True
        for ep in self.endpoints:
            if self.backend.info_path:
                self._probe_tgi(ep)
            else:
                self._probe_openai(ep)

    def _probe_tgi(self, ep: Endpoint) -> None:
        try:
            response = self.http.get(ep.url + "/info", timeout=min(10.0, self.request_timeout))
            response.raise_for_status()
            info = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            log.warning("cannot read %s/info (%s); using llm_max_concurrency=%d", ep.url, exc, ep.cap)
            if isinstance(exc, httpx.ConnectError):
                with self._cond:
                    self._mark_down(ep)
            return
        ep.info = info if isinstance(info, dict) else None
        if not ep.info:
            log.warning("%s/info is not an object; using llm_max_concurrency=%d", ep.url, ep.cap)
            return
        model_id = ep.info.get("model_id")
        ep.model_id = model_id[:256] if isinstance(model_id, str) and model_id.strip() else None
        server_cap = ep.info.get("max_concurrent_requests")
        if not (isinstance(server_cap, int) and not isinstance(server_cap, bool) and server_cap > 0):
            log.warning(
                "%s/info reports max_concurrent_requests=%r; using llm_max_concurrency=%d",
                ep.url, str(server_cap)[:40], ep.cap,
            )  # fmt: skip
        else:
            with self._cond:
                ep.cap = min(self.max_concurrency, server_cap)
                ep.limit = float(ep.cap)

    def _probe_openai(self, ep: Endpoint) -> None:
        try:
            response = self.http.get(ep.url + "/v1/models", timeout=min(10.0, self.request_timeout))
            response.raise_for_status()
            data = response.json().get("data") or []
            if isinstance(data, list) and data and isinstance(data[0], dict):
                model_id = data[0].get("id")
                ep.model_id = model_id[:256] if isinstance(model_id, str) and model_id.strip() else None
        except (httpx.HTTPError, ValueError, AttributeError) as exc:
            log.info("cannot read %s/v1/models (%s)", ep.url, exc)

    @property
    def capacity(self) -> int:
        """Requests this process may have in flight at once, over all endpoints."""
        return sum(ep.cap for ep in self.endpoints)

    def model_id(self) -> str | None:
        """The model the (first reachable) server reports, for when no model is configured."""
        self.probe()
        return next((ep.model_id for ep in self.endpoints if ep.model_id), None)

    # -- slots ----------------------------------------------------------------------------
    def _acquire(self, deadline: float) -> Endpoint | None:
        """Take a slot on the reachable endpoint with most room; wait while every slot is taken.

        Endpoints that refused a connection recently are skipped while any other is reachable.
        """
        with self._cond:
            while True:
                now = time.monotonic()
                up = [ep for ep in self.endpoints if ep.down_until <= now] or self.endpoints
                ready = [ep for ep in up if ep.free() >= 1]
                if ready:
                    ep = max(ready, key=lambda e: e.free() / max(e.limit, 1.0))
                    ep.active += 1
                    return ep
                remaining = deadline - now
                if remaining <= 0:
                    return None
                wake = [ep.down_until - now for ep in self.endpoints if ep.down_until > now]
                self._cond.wait(timeout=min([remaining, *wake]))

    def _release(self, ep: Endpoint, outcome: str) -> None:
        with self._cond:
            ep.active -= 1
            if outcome == "ok":
                ep.failures = 0
                ep.down_until = 0.0
                if ep.limit < ep.cap:
                    ep.limit = min(float(ep.cap), ep.limit + 1.0 / max(ep.limit, 1.0))
            elif outcome == "overloaded":
                ep.limit = max(1.0, ep.limit / 2)
            elif outcome == "down":
                self._mark_down(ep)
            self._cond.notify_all()

    def _mark_down(self, ep: Endpoint) -> None:
        """Avoid an endpoint that refused a connection for 1, 2, 4 ... 60 s (while others are up)."""
        ep.failures += 1
        ep.down_until = time.monotonic() + min(60.0, 2.0 ** (ep.failures - 1))

    # -- the call ---------------------------------------------------------------------------
    def post(self, body: dict[str, Any], deadline: float) -> Completion:
        """POST ``body`` to the backend's route on some endpoint, retrying transient faults."""
        self.probe()
        last = "no attempt made"
        connect_failures = 0
        attempt = 0
        while True:
            ep = self._acquire(deadline)
            if ep is None:
                last = f"the call's deadline passed while waiting for a free slot; before that: {last}"
                break
            remaining = deadline - time.monotonic()
            outcome, retry_after = "error", None
            try:
                with self._cond:
                    self.stats["requests"] += 1
                response = self.http.post(
                    ep.url + self.backend.path,
                    json=body,
                    timeout=max(0.001, min(self.request_timeout, remaining)),
                )
                status = response.status_code
                if status == 200:
                    try:
                        completion = self.backend.read(
                            response.content, response.headers.get("content-type", "")
                        )
                        outcome = "ok"
                        return completion
                    except ErrorBody as exc:  # HTTP 200 whose body is {"error": ...}
                        if exc.error_type in ("validation", "invalid_request_error"):
                            outcome = "ok"  # the server is fine; the request is not
                            raise LLMRequestRejected(status, f"error in a 200 answer: {exc}") from None
                        if exc.error_type == "overloaded":
                            outcome = "overloaded"
                        last = f"{ep.url}: HTTP 200 with an error ({exc.error_type}): {exc}"
                    except (ValueError, RecursionError) as exc:  # a proxy's HTML page, a truncated body
                        last = f"{ep.url}: unreadable answer ({str(exc)[:200]})"
                elif status == 429:
                    outcome, retry_after = "overloaded", _retry_after(response)
                    last = f"{ep.url}: HTTP 429 {_error_text(response)}"
                elif status in RETRY_STATUS or status >= 500:
                    retry_after = _retry_after(response)
                    last = f"{ep.url}: HTTP {status} {_error_text(response)}"
                elif status in REJECT_STATUS:
                    outcome = "ok"  # the server is fine; the request is not
                    raise LLMRequestRejected(status, _error_text(response))
                elif status in (401, 403):
                    raise ConfigError(
                        f"LLM endpoint {ep.url} refused the credentials (HTTP {status})",
                        setting="SCICODEPILE_LLM_API_KEY",
                    )
                elif status == 404:
                    raise ConfigError(
                        f"LLM endpoint {ep.url} has no route {self.backend.path} (HTTP 404): wrong URL, "
                        f"or the server does not speak the {self.backend.name!r} API",
                        setting=f"{self.setting} / SCICODEPILE_LLM_API",
                    )
                else:
                    raise LLMRequestRejected(status, _error_text(response))
            except httpx.TimeoutException as exc:
                if remaining < self.request_timeout:  # cut short by the call's deadline, not the server
                    last = f"the call's deadline passed during a request; before that: {last}"
                else:
                    last = f"{ep.url}: timeout ({type(exc).__name__})"
            except httpx.ConnectError as exc:
                outcome = "down"
                connect_failures += 1
                last = f"{ep.url}: cannot connect ({exc})"
            except httpx.TransportError as exc:  # dropped connection, reset, protocol error
                last = f"{ep.url}: connection dropped ({type(exc).__name__}: {exc})"
            finally:
                self._release(ep, outcome)
            with self._cond:
                self.stats["overloaded" if outcome == "overloaded" else "errors"] += 1
            if attempt >= self.max_retries:
                break
            delay = backoff_delay(attempt, self.backoff_base, self.backoff_max, retry_after)
            attempt += 1
            if time.monotonic() + delay >= deadline:
                break
            with self._cond:
                self.stats["retries"] += 1
            log.debug("LLM retry %d in %.2fs after %s", attempt, delay, last)
            time.sleep(delay)
        hint = f" (check {self.setting})" if connect_failures and connect_failures == attempt + 1 else ""
        raise LLMUnavailable(f"no answer from the LLM after {attempt + 1} attempt(s): {last}{hint}")

    def close(self) -> None:
        self.http.close()
