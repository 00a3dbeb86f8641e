"""GitHub REST/GraphQL client and the "github" source.

The client obeys GitHub's limits instead of discovering them by being refused: it reads
``X-RateLimit-Limit/Remaining/Reset/Resource`` on every answer and waits for the reset before the
window's quota is spent; it honours ``Retry-After`` and secondary-limit 403/429s; 5xx and transport
errors are retried with exponential backoff; GET answers carry ``ETag`` and are revalidated with
``If-None-Match``.  It counts the calls it spends per API (search, core, GraphQL).  The token is a
``SecretStr`` and is never logged (only whether one is set).  The base URL is a setting, so GitHub
Enterprise (``https://HOST/api/v3``) works too.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx

from scicodepile.errors import ConfigError, SciCodePileError
from scicodepile.records import RepositoryRecord
from scicodepile.settings import Settings

log = logging.getLogger("scicodepile.github")

_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="([^"]+)"')
REQUIRED_ITEM_FIELDS = ("id", "full_name", "stargazers_count", "created_at", "pushed_at", "fork")


class GitHubError(SciCodePileError):
    """A request that failed for good; ``reason`` is a short machine-readable label."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(f"{reason}: {message}")


@dataclass
class RateState:
    """What the last answer said about one resource's quota."""

    limit: int | None = None
    remaining: int | None = None
    reset: float | None = None
    blocked_until: float = 0.0


@dataclass
class GitHubResponse:
    status: int
    data: Any
    headers: httpx.Headers
    url: str
    links: dict[str, str] = field(default_factory=dict)
    from_cache: bool = False


@dataclass
class SearchPage:
    total_count: int
    incomplete: bool
    items: list[dict[str, Any]]
    next_url: str | None
    url: str


def parse_links(header: str | None) -> dict[str, str]:
    """``Link: <url>; rel="next", ...`` as ``{"next": url, ...}``."""
    return {rel: url for url, rel in _LINK.findall(header or "")}


def graphql_url(api_url: str) -> str:
    """GraphQL endpoint for a REST base URL (api.github.com or GitHub Enterprise ``.../api/v3``)."""
    base = api_url.rstrip("/")
    if base.endswith("/api/v3"):
        return base[: -len("/v3")] + "/graphql"
    return base + "/graphql"


class GitHubClient:
    """A rate-limit-obeying GitHub API client (one per process and token)."""

    def __init__(
        self,
        settings: Settings,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.settings = settings
        self.base_url = settings.github_api_url.rstrip("/")
        self._sleep, self._clock = sleep, clock
        headers = {
            "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28",
            "User-Agent": "scicodepile-crawler",
        }
        token = settings.github_token.get_secret_value()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self.authenticated = bool(token)
        self._http = httpx.Client(headers=headers, timeout=settings.github_timeout_s, follow_redirects=True)
        self.rate: dict[str, RateState] = {}
        self.spent: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self._etags: dict[str, tuple[str, Any]] = {}

    def __repr__(self) -> str:  # never the token
        return f"GitHubClient({self.base_url!r}, authenticated={self.authenticated})"

    def close(self) -> None:
        self._http.close()

    # ------------------------------------------------------------------------------ pacing
    def _state(self, resource: str) -> RateState:
        return self.rate.setdefault(resource, RateState())

    def _wait_for_quota(self, resource: str) -> None:
        state = self._state(resource)
        now = self._clock()
        wait = 0.0
        if state.blocked_until > now:
            wait = state.blocked_until - now
        if state.remaining is not None and state.remaining <= 0 and state.reset is not None:
            wait = max(wait, state.reset - now + self.settings.github_rate_margin_s)
        if wait > 0:
            self.events["waited"] += 1
            log.info("github %s quota: waiting %.2fs", resource, wait)
            self._sleep(wait)
            if state.remaining is not None and state.remaining <= 0:
                state.remaining = None  # unknown until the next answer tells us

    def _read_limits(self, resource: str, headers: httpx.Headers) -> None:
        name = headers.get("x-ratelimit-resource", resource)
        state = self._state(name)
        try:
            if "x-ratelimit-limit" in headers:
                state.limit = int(headers["x-ratelimit-limit"])
            if "x-ratelimit-remaining" in headers:
                state.remaining = int(headers["x-ratelimit-remaining"])
            if "x-ratelimit-reset" in headers:
                state.reset = float(headers["x-ratelimit-reset"])
        except ValueError:
            log.warning("github sent unparseable rate-limit headers; ignoring them")

    def _backoff(self, attempt: int) -> float:
        base = self.settings.github_backoff_s * (2**attempt)
        return min(base, 60.0) * (0.5 + random.random() / 2)

    # ----------------------------------------------------------------------------- requests
    def request(
        self,
        method: str,
        url: str,
        *,
        resource: str = "core",
        params: dict[str, Any] | None = None,
        json_body: Any = None,
        raw: bool = False,
        accept: str | None = None,
    ) -> GitHubResponse:
        """One API call with pacing, retries and ETag revalidation; raises :class:`GitHubError`."""
        if not url.startswith("http"):
            url = self.base_url + "/" + url.lstrip("/")
        if params:
            url = url + ("&" if "?" in url else "?") + urlencode(params)
        last = "no attempt"
        for attempt in range(self.settings.github_max_retries + 1):
            self._wait_for_quota(resource)
            headers: dict[str, str] = {}
            if accept:
                headers["Accept"] = accept
            cached = self._etags.get(url) if method == "GET" and not raw else None
            if cached:
                headers["If-None-Match"] = cached[0]
            try:
                resp = self._http.request(method, url, headers=headers, json=json_body)
            except httpx.TransportError as exc:
                last = f"transport error {type(exc).__name__}"
                self.events["transport_error"] += 1
                self._sleep(self._backoff(attempt))
                continue
            self.spent[resource] += 1
            self._read_limits(resource, resp.headers)
            status = resp.status_code
            if status == 304 and cached:
                self.events["not_modified"] += 1
                return GitHubResponse(
                    304, cached[1], resp.headers, url, parse_links(resp.headers.get("link")), from_cache=True
                )
            if status in (403, 429):
                wait = self._limit_wait(resp, resource)
                if wait is not None:
                    last = f"rate limited ({status})"
                    self._state(resource).blocked_until = self._clock() + wait
                    continue
            if status == 401:
                raise ConfigError(
                    "GitHub rejected the token (401 Bad credentials)", setting="SCICODEPILE_GITHUB_TOKEN"
                )
            if status >= 500:
                last = f"HTTP {status}"
                self.events["server_error"] += 1
                self._sleep(self._backoff(attempt))
                continue
            if status == 422:
                raise GitHubError("invalid_query", _message(resp))
            if status >= 400:
                raise GitHubError(f"http_{status}", _message(resp))
            if raw:
                return GitHubResponse(status, resp.content, resp.headers, url)
            try:
                data = resp.json()
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                last = f"malformed JSON ({exc.msg if hasattr(exc, 'msg') else exc})"
                self.events["malformed_json"] += 1
                if attempt >= 2:  # a server that keeps sending garbage for this URL: give up on it
                    raise GitHubError("malformed_json", f"{last} from {_strip_query(url)}") from None
                self._sleep(self._backoff(attempt))
                continue
            if method == "GET" and (etag := resp.headers.get("etag")):
                self._etags[url] = (etag, data)
                if len(self._etags) > 2048:
                    self._etags.pop(next(iter(self._etags)))
            return GitHubResponse(status, data, resp.headers, url, parse_links(resp.headers.get("link")))
        raise GitHubError(
            "retries_exhausted", f"{last} after {self.settings.github_max_retries + 1} attempts"
        )

    def _limit_wait(self, resp: httpx.Response, resource: str) -> float | None:
        """Seconds to wait when a 403/429 is a rate limit; None when it is a plain refusal."""
        if (retry_after := resp.headers.get("retry-after")) is not None:
            self.events["secondary_limit"] += 1
            try:
                return max(float(retry_after), 0.0)
            except ValueError:
                return self.settings.github_secondary_wait_s
        if resp.headers.get("x-ratelimit-remaining") == "0":
            self.events["primary_limit"] += 1
            reset = float(resp.headers.get("x-ratelimit-reset", self._clock()))
            return max(reset - self._clock(), 0.0) + self.settings.github_rate_margin_s
        if "secondary rate limit" in _message(resp).lower():
            self.events["secondary_limit"] += 1
            return self.settings.github_secondary_wait_s
        return None

    # ---------------------------------------------------------------------------- endpoints
    def search_repositories(self, q: str | None = None, *, url: str | None = None) -> SearchPage:
        """One page of ``/search/repositories``: the first (from ``q``) or the one at ``url``."""
        if url is None:
            url = (
                self.base_url
                + "/search/repositories?"
                + urlencode({"q": q, "per_page": self.settings.github_per_page, "page": 1})
            )
        resp = self.request("GET", url, resource="search")
        data = resp.data
        if not isinstance(data, dict) or not isinstance(data.get("items"), list):
            raise GitHubError(
                "malformed_response", f"search answer without an items list from {_strip_query(url)}"
            )
        try:
            total = int(data.get("total_count", 0))
        except (TypeError, ValueError):
            raise GitHubError("malformed_response", "search answer with a non-numeric total_count") from None
        return SearchPage(
            total, bool(data.get("incomplete_results")), data["items"], resp.links.get("next"), url
        )

    def readmes(self, full_names: list[str]) -> dict[str, str | None]:
        """README texts of many repositories, batched through GraphQL (one call per batch)."""
        out: dict[str, str | None] = {}
        batch = self.settings.github_graphql_batch
        for start in range(0, len(full_names), batch):
            chunk = full_names[start : start + batch]
            parts = []
            for i, name in enumerate(chunk):
                owner, _, repo = name.partition("/")
                parts.append(
                    f"r{i}: repository(owner: {json.dumps(owner)}, name: {json.dumps(repo)}) "
                    '{ object(expression: "HEAD:README.md") { ... on Blob { text } } }'
                )
            resp = self.request(
                "POST",
                graphql_url(self.base_url),
                resource="graphql",
                json_body={"query": "query { " + " ".join(parts) + " }"},
            )
            data = (resp.data or {}).get("data") or {}
            for i, name in enumerate(chunk):
                node = data.get(f"r{i}") or {}
                out[name] = (node.get("object") or {}).get("text")
        return out

    def prime(self) -> None:
        """Learn every quota from ``/rate_limit`` (a call GitHub does not count), so a fresh process
        never spends a request only to be told the window is exhausted."""
        try:
            resp = self._http.get(self.base_url + "/rate_limit")
        except httpx.TransportError:
            return
        if resp.status_code == 401:
            raise ConfigError(
                "GitHub rejected the token (401 Bad credentials)", setting="SCICODEPILE_GITHUB_TOKEN"
            )
        if resp.status_code != 200:
            return
        try:
            resources = resp.json().get("resources", {})
        except (json.JSONDecodeError, AttributeError):
            return
        for name, info in resources.items():
            if isinstance(info, dict):
                state = self._state(name)
                state.limit, state.remaining = info.get("limit"), info.get("remaining")
                state.reset = float(info["reset"]) if info.get("reset") is not None else None

    def budget(self) -> dict[str, dict[str, Any]]:
        """Calls spent per API, with the quota GitHub last reported (for the run report)."""
        out: dict[str, dict[str, Any]] = {}
        for resource in sorted(set(self.spent) | set(self.rate)):
            state = self._state(resource)
            out[resource] = {
                "spent": self.spent.get(resource, 0),
                "limit": state.limit,
                "remaining": state.remaining,
            }
        return out


def _message(resp: httpx.Response) -> str:
    try:
        body = resp.json()
        if isinstance(body, dict) and body.get("message"):
            errors = body.get("errors")
            return str(body["message"]) + (f" {json.dumps(errors)[:300]}" if errors else "")
    except (json.JSONDecodeError, UnicodeDecodeError):
        pass
    return resp.text[:200] or f"HTTP {resp.status_code}"


def _strip_query(url: str) -> str:
    return url.split("?", 1)[0]


def _parse_time(value: Any) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


def item_to_record(item: dict[str, Any], source: str = "github") -> RepositoryRecord:
    """A search-result item as a record; raises ``ValueError("missing_field:NAME")`` on a bad item."""
    if not isinstance(item, dict):
        raise ValueError("malformed_item")
    for name in REQUIRED_ITEM_FIELDS:
        if item.get(name) is None:
            raise ValueError(f"missing_field:{name}")
    try:
        _parse_time(item["created_at"])
        _parse_time(item["pushed_at"])
        stars = int(item["stargazers_count"])
    except (TypeError, ValueError):
        raise ValueError("malformed_field") from None
    lic = item.get("license") or {}
    spdx = lic.get("spdx_id") if isinstance(lic, dict) else None
    return RepositoryRecord(
        source=source,
        source_id=str(item["id"]),
        full_name=str(item["full_name"]),
        url=item.get("html_url"),
        description=item.get("description"),
        stars=stars,
        forks=item.get("forks_count"),
        license=None if spdx in (None, "NOASSERTION") else spdx,
        topics=list(item.get("topics") or []),
        language=item.get("language"),
        is_fork=bool(item.get("fork")),
        archived=bool(item.get("archived")),
        size_kb=item.get("size"),
        default_branch=item.get("default_branch"),
        created_at=item["created_at"],
        pushed_at=item["pushed_at"],
        extra={"node_id": item.get("node_id")} if item.get("node_id") else {},
    )


class GitHubSource:
    """The "github" source: discovery is the crawl (:mod:`scicodepile.crawl`); fetch gets a tarball."""

    name = "github"

    def __init__(self, settings: Settings, client: GitHubClient | None = None) -> None:
        self.settings = settings
        self.client = client or GitHubClient(settings)

    def discover(
        self, shard: int = 0, num_shards: int = 1, limit: int | None = None
    ) -> Iterator[RepositoryRecord]:
        """GitHub discovery runs through search partitions (``scicodepile.crawl.stage``), not here."""
        raise NotImplementedError("github discovery runs through the crawl's search partitions")

    def fetch(self, repo: Any, workdir: Path) -> Any:
        """Download the repository's tarball at the default branch's current commit (pinned by sha)."""
        from scicodepile.sources import FetchedSnapshot

        branch = repo.default_branch or "HEAD"
        resp = self.client.request("GET", f"repos/{repo.full_name}/commits/{branch}")
        sha = str(resp.data["sha"])
        tar = self.client.request("GET", f"repos/{repo.full_name}/tarball/{sha}", raw=True)
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / f"{repo.full_name.replace('/', '__')}-{sha[:12]}.tar.gz"
        path.write_bytes(tar.data)
        return FetchedSnapshot(commit=sha, path=path, kind="tar.gz")

    def readmes(self, full_names: list[str]) -> dict[str, str | None]:
        """READMEs of the repositories that survived the cheap filters (GraphQL batches)."""
        return self.client.readmes(full_names)
