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
import math
import posixpath
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode, urljoin, urlsplit

import httpx

from scicodepile.errors import ConfigError, SciCodePileError
from scicodepile.records import RepositoryRecord
from scicodepile.settings import Settings
from scicodepile.text import clean_text

log = logging.getLogger("scicodepile.github")

_LINK = re.compile(r'<([^>]+)>\s*;\s*rel="([^"]+)"')
MAX_JSON_BYTES = 32 << 20  # a search page of 100 items is ~0.5 MB; anything this big is not an answer
MAX_WAIT_S = 3600.0  # GitHub's longest rate-limit window; a longer wait asked for is a broken answer
MAX_REDIRECTS = 5
# owner/name as GitHub (and GitHub Enterprise, whose logins may hold "_" and ".") allows them; no
# "." or ".." name, nothing that could walk out of a URL path or a file name
FULL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}/(?!\.\.?$)[A-Za-z0-9_.-]{1,100}")
_SHA = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")
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
        # redirects are followed by request() itself, and only within the base URL (the token goes
        # with every request)
        self._http = httpx.Client(headers=headers, timeout=settings.github_timeout_s, follow_redirects=False)
        self.max_json_bytes = MAX_JSON_BYTES
        self.max_raw_bytes = settings.curate_max_archive_bytes
        self.rate: dict[str, RateState] = {}
        self.spent: Counter[str] = Counter()
        self.events: Counter[str] = Counter()
        self._etags: dict[str, tuple[str, Any]] = {}

    def __repr__(self) -> str:  # never the token
        return f"GitHubClient({self.base_url!r}, authenticated={self.authenticated})"

    def close(self) -> None:
        self._http.close()

    def forget(self, url: str) -> None:
        """Drop the ETag copy of ``url`` (so the next request fetches it whole, not a 304)."""
        self._etags.pop(url, None)

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
        wait = self._bounded(wait) if wait > 0 else 0.0
        if wait > 0:
            self.events["waited"] += 1
            log.info("github %s quota: waiting %.2fs", resource, wait)
            self._sleep(wait)
            if state.remaining is not None and state.remaining <= 0:
                state.remaining = None  # unknown until the next answer tells us

    def _read_limits(self, resource: str, headers: httpx.Headers) -> None:
        name = headers.get("x-ratelimit-resource", resource)
        state = self._state(name)
        limit = _finite(headers.get("x-ratelimit-limit"))
        remaining = _finite(headers.get("x-ratelimit-remaining"))
        reset = _finite(headers.get("x-ratelimit-reset"))
        if any(v is None for k, v in (("x-ratelimit-limit", limit), ("x-ratelimit-remaining", remaining),
                                      ("x-ratelimit-reset", reset)) if k in headers):  # fmt: skip
            self.events["bad_rate_headers"] += 1
            log.warning("github sent unparseable rate-limit headers; ignoring them")
        if limit is not None:
            state.limit = int(limit)
        if remaining is not None:
            state.remaining = int(remaining)
        if reset is not None:
            state.reset = reset

    def _backoff(self, attempt: int) -> float:
        base = self.settings.github_backoff_s * (2**attempt)
        return min(base, 60.0) * (0.5 + random.random() / 2)

    def _bounded(self, wait: float | None) -> float:
        """A wait GitHub asked for, clamped to ``[0, MAX_WAIT_S]`` (a reset years away, NaN or inf from a
        broken proxy must not put the crawl to sleep for ever); unparseable means the secondary wait."""
        if wait is None or wait != wait:  # None or NaN
            return self.settings.github_secondary_wait_s
        if wait > MAX_WAIT_S:
            self.events["absurd_wait_clamped"] += 1
            log.warning("github asked for a %.0fs wait; waiting %ds instead", min(wait, 1e12), MAX_WAIT_S)
        return min(max(wait, 0.0), MAX_WAIT_S)

    def within_base(self, url: str) -> bool:
        """True when ``url`` is under the configured base URL (same scheme, host, port and path prefix).

        The token is sent with every request, so a ``Link`` header, a redirect or a stored cursor that
        points anywhere else is never followed: a token must never reach another host.
        """
        a, b = urlsplit(url), urlsplit(self.base_url)
        if (a.scheme.lower(), a.netloc.lower()) != (b.scheme.lower(), b.netloc.lower()):
            return False
        prefix = b.path.rstrip("/")
        path = posixpath.normpath(a.path or "/")
        return not prefix or path == prefix or path.startswith(prefix + "/")

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
        """One API call with pacing, retries and ETag revalidation; raises :class:`GitHubError`.

        Only URLs under the configured base URL are requested (redirects too); bodies larger than
        ``max_json_bytes`` (``max_raw_bytes`` for archives) are refused without being read whole.
        """
        if not url.startswith(("http://", "https://")):
            url = self.base_url + "/" + url.lstrip("/")
        if params:
            url = url + ("&" if "?" in url else "?") + urlencode(params)
        self._check_base(url)
        last = "no attempt"
        redirects = 0
        attempt = 0
        while attempt <= self.settings.github_max_retries:
            self._wait_for_quota(resource)
            headers: dict[str, str] = {}
            if accept:
                headers["Accept"] = accept
            cached = self._etags.get(url) if method == "GET" and not raw else None
            if cached:
                headers["If-None-Match"] = cached[0]
            try:
                status, resp_headers, content = self._send(method, url, headers, json_body, raw)
            except httpx.DecodingError as exc:
                self.spent[resource] += 1
                last = f"corrupt body encoding ({type(exc).__name__})"
                self.events["malformed_body"] += 1
                if attempt >= 2:
                    raise GitHubError("malformed_body", f"{last} from {_strip_query(url)}") from None
                self._sleep(self._backoff(attempt))
                attempt += 1
                continue
            except httpx.RequestError as exc:  # transport errors, a body cut short, too many redirects
                last = f"transport error {type(exc).__name__}"
                self.events["transport_error"] += 1
                self._sleep(self._backoff(attempt))
                attempt += 1
                continue
            self.spent[resource] += 1
            self._read_limits(resource, resp_headers)
            links = parse_links(resp_headers.get("link"))
            if status in (301, 302, 303, 307, 308) and resp_headers.get("location"):
                target = urljoin(url, resp_headers["location"])
                self._check_base(target, what="redirect")
                redirects += 1
                if redirects > MAX_REDIRECTS:
                    raise GitHubError(
                        "redirect_loop", f"more than {MAX_REDIRECTS} redirects from {_strip_query(url)}"
                    )
                self.events["redirect"] += 1
                url = target
                if status == 303:
                    method, json_body = "GET", None
                continue
            if status == 304:
                if cached:
                    self.events["not_modified"] += 1
                    return GitHubResponse(304, cached[1], resp_headers, url, links, from_cache=True)
                last = "304 Not Modified for a request without If-None-Match"
                self.events["unexpected_304"] += 1
                self._sleep(self._backoff(attempt))
                attempt += 1
                continue
            if status in (403, 429):
                wait = self._limit_wait(status, resp_headers, content, resource, attempt)
                if wait is not None:
                    last = f"rate limited ({status})"
                    self._state(resource).blocked_until = self._clock() + wait
                    attempt += 1
                    continue
            if status == 401:
                raise ConfigError(
                    "GitHub rejected the token (401 Bad credentials)", setting="SCICODEPILE_GITHUB_TOKEN"
                )
            if status >= 500:
                last = f"HTTP {status}"
                self.events["server_error"] += 1
                self._sleep(self._backoff(attempt))
                attempt += 1
                continue
            if status == 422:
                raise GitHubError("invalid_query", _message(status, content))
            if status >= 400:
                raise GitHubError(f"http_{status}", _message(status, content))
            if raw:
                return GitHubResponse(status, content, resp_headers, url)
            try:
                data = json.loads(content)
            except ValueError as exc:  # JSONDecodeError, UnicodeDecodeError: an HTML page, a cut body
                last = f"malformed JSON ({exc.msg if hasattr(exc, 'msg') else type(exc).__name__})"
                self.events["malformed_json"] += 1
                if attempt >= 2:  # a server that keeps sending garbage for this URL: give up on it
                    raise GitHubError("malformed_json", f"{last} from {_strip_query(url)}") from None
                self._sleep(self._backoff(attempt))
                attempt += 1
                continue
            if method == "GET" and (etag := resp_headers.get("etag")):
                self._etags[url] = (etag, data)
                if len(self._etags) > 2048:
                    self._etags.pop(next(iter(self._etags)))
            return GitHubResponse(status, data, resp_headers, url, links)
        raise GitHubError(
            "retries_exhausted", f"{last} after {self.settings.github_max_retries + 1} attempts"
        )

    def _check_base(self, url: str, what: str = "URL") -> None:
        if not self.within_base(url):
            parts = urlsplit(url)
            raise GitHubError(
                "off_base_url",
                f"refusing a {what} to {parts.scheme}://{parts.netloc}{parts.path[:200]}: not under the "
                f"configured SCICODEPILE_GITHUB_API_URL {self.base_url} (the token is never sent elsewhere)",
            )

    def _send(
        self, method: str, url: str, headers: dict[str, str], json_body: Any, raw: bool
    ) -> tuple[int, httpx.Headers, bytes]:
        """Send one request and read its body, refusing one larger than the limit as it streams in."""
        limit = self.max_raw_bytes if raw else self.max_json_bytes
        with self._http.stream(method, url, headers=headers, json=json_body) as resp:
            declared = resp.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > limit:
                raise GitHubError(
                    "response_too_large", f"{_strip_query(url)} announced {declared} bytes (limit {limit})"
                )
            chunks: list[bytes] = []
            size = 0
            for chunk in resp.iter_bytes():
                size += len(chunk)
                if size > limit:
                    raise GitHubError(
                        "response_too_large", f"{_strip_query(url)} sent more than {limit} bytes"
                    )
                chunks.append(chunk)
            return resp.status_code, resp.headers, b"".join(chunks)

    def _limit_wait(
        self, status: int, headers: httpx.Headers, content: bytes, resource: str, attempt: int
    ) -> float | None:
        """Seconds to wait when a 403/429 is a rate limit; None when it is a plain refusal.

        ``Retry-After`` first, then an exhausted primary quota (wait for its reset), then a secondary
        limit without ``Retry-After`` (a 429, or a 403 that says so): GitHub asks for at least a minute
        and growing waits, so ``github_secondary_wait_s`` doubles with each attempt.  Every wait is
        bounded by :meth:`_bounded`.
        """
        secondary = self._bounded(self.settings.github_secondary_wait_s * (2 ** min(attempt, 6)))
        if (retry_after := headers.get("retry-after")) is not None:
            self.events["secondary_limit"] += 1
            value = _finite(retry_after)
            return secondary if value is None else self._bounded(value)
        if headers.get("x-ratelimit-remaining") == "0":
            self.events["primary_limit"] += 1
            reset = _finite(headers.get("x-ratelimit-reset"))
            if reset is None:
                return secondary
            return self._bounded(max(reset - self._clock(), 0.0) + self.settings.github_rate_margin_s)
        if status == 429 or "secondary rate limit" in _message(status, content).lower():
            self.events["secondary_limit"] += 1
            return secondary
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
        total = data.get("total_count", 0)
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            raise GitHubError(
                "malformed_response", f"search answer with total_count {str(total)[:40]!r}, not a count"
            )
        return SearchPage(
            total, data.get("incomplete_results") is True, data["items"], resp.links.get("next"), url
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
            data = resp.data.get("data") if isinstance(resp.data, dict) else None
            if not isinstance(data, dict):  # {"errors": [...]} alone, a list, null: no README known
                self.events["graphql_no_data"] += 1
                data = {}
            for i, name in enumerate(chunk):
                node = data.get(f"r{i}")
                obj = node.get("object") if isinstance(node, dict) else None
                text = obj.get("text") if isinstance(obj, dict) else None
                out[name] = text if isinstance(text, str) else None
        return out

    def prime(self) -> None:
        """Learn every quota from ``/rate_limit`` (a call GitHub does not count), so a fresh process
        never spends a request only to be told the window is exhausted."""
        resp = None
        for attempt in range(3):
            try:
                resp = self._http.get(self.base_url + "/rate_limit")
                break
            except (httpx.ConnectError, httpx.ConnectTimeout) as exc:
                # No connection at all (DNS, refused, no route): a configuration or network fault,
                # named now, instead of every partition retrying its way to a failure for hours.
                if attempt == 2:
                    raise ConfigError(
                        f"the GitHub API at {self.base_url} is unreachable ({type(exc).__name__})",
                        setting="SCICODEPILE_GITHUB_API_URL",
                    ) from None
                self._sleep(self._backoff(attempt))
            except httpx.RequestError:
                return
        if resp is None:
            return
        if resp.status_code == 401:
            raise ConfigError(
                "GitHub rejected the token (401 Bad credentials)", setting="SCICODEPILE_GITHUB_TOKEN"
            )
        if resp.status_code != 200 or len(resp.content) > self.max_json_bytes:
            return
        try:
            body = resp.json()
        except ValueError:
            return
        resources = body.get("resources") if isinstance(body, dict) else None
        if not isinstance(resources, dict):
            return
        for name, info in resources.items():
            if not isinstance(info, dict):
                continue
            limit, remaining = _finite(info.get("limit")), _finite(info.get("remaining"))
            state = self._state(str(name))
            state.limit = None if limit is None else int(limit)
            state.remaining = None if remaining is None else int(remaining)
            state.reset = _finite(info.get("reset"))

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


def _message(status: int, content: bytes) -> str:
    """GitHub's ``message`` (and ``errors``) from an error body, or the start of whatever was sent."""
    try:
        body = json.loads(content)
        if isinstance(body, dict) and body.get("message"):
            errors = body.get("errors")
            return str(body["message"])[:500] + (f" {json.dumps(errors)[:300]}" if errors else "")
    except ValueError:
        pass
    text = content[:200].decode("utf-8", "replace").strip()
    return text or f"HTTP {status}"


def _finite(value: Any) -> float | None:
    """A finite float from a header or JSON value, or None (garbage, NaN, inf, booleans)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _strip_query(url: str) -> str:
    return url.split("?", 1)[0]


def _parse_time(value: Any) -> datetime:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00"))


_INT_MAX = 2**31 - 1  # the database's integer columns
_EARLIEST = datetime(1990, 1, 1, tzinfo=UTC)


def _bad(name: str) -> ValueError:
    return ValueError(f"malformed_field:{name}")


def _count(item: dict[str, Any], name: str, required: bool = False) -> int | None:
    value = item.get(name)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT_MAX:
        raise _bad(name)
    return value


def _string(item: dict[str, Any], name: str, limit: int) -> str | None:
    value = item.get(name)
    if value is None:
        return None
    if not isinstance(value, str):
        raise _bad(name)
    return clean_text(value, limit)


def _flag(item: dict[str, Any], name: str) -> bool:
    value = item.get(name)
    if value is None:
        return False
    if not isinstance(value, bool):  # "false" would be truthy
        raise _bad(name)
    return value


def _instant(item: dict[str, Any], name: str) -> str:
    value = item[name]
    if not isinstance(value, str) or len(value) > 40:
        raise _bad(name)
    try:
        when = _parse_time(value)
    except ValueError:
        raise _bad(name) from None
    when = when if when.tzinfo else when.replace(tzinfo=UTC)
    if not _EARLIEST <= when <= datetime.now(UTC) + timedelta(days=1):
        raise ValueError(f"implausible_date:{name}")
    return value


def item_to_record(item: dict[str, Any], source: str = "github") -> RepositoryRecord:
    """A search-result item as a record, every field type-checked.

    Raises ``ValueError`` with a countable reason: ``missing_field:NAME`` (a required field absent or
    null), ``malformed_field:NAME`` (a wrong type: stars as a string, ``fork`` as ``"false"``, a
    ``full_name`` that is not ``owner/name``, topics that are not a list of strings),
    ``implausible_date:NAME`` (before 1990 or in the future).  Strings are made storable
    (:func:`~scicodepile.text.clean_text`).  Nothing is coerced or invented.
    """
    if not isinstance(item, dict):
        raise ValueError("malformed_item")
    for name in REQUIRED_ITEM_FIELDS:
        if item.get(name) is None:
            raise ValueError(f"missing_field:{name}")
    repo_id = item["id"]
    if isinstance(repo_id, bool) or not isinstance(repo_id, int) or repo_id <= 0:
        raise _bad("id")
    full_name = item["full_name"]
    if not isinstance(full_name, str) or not FULL_NAME.fullmatch(full_name):
        raise _bad("full_name")
    stars = _count(item, "stargazers_count", required=True)
    if not isinstance(item["fork"], bool):
        raise _bad("fork")
    created, pushed = _instant(item, "created_at"), _instant(item, "pushed_at")
    topics = item.get("topics")
    if topics is None:
        topics = []
    if not isinstance(topics, list) or not all(isinstance(t, str) for t in topics):
        raise _bad("topics")
    lic = item.get("license")
    if lic is not None and not isinstance(lic, dict):
        raise _bad("license")
    spdx = (lic or {}).get("spdx_id")
    if spdx is not None and not isinstance(spdx, str):
        raise _bad("license")
    node_id = _string(item, "node_id", 128)
    return RepositoryRecord(
        source=source,
        source_id=str(repo_id),
        full_name=full_name,
        url=_string(item, "html_url", 2048),
        description=_string(item, "description", 20_000),
        stars=stars,
        forks=_count(item, "forks_count"),
        license=None if spdx in (None, "NOASSERTION") else clean_text(spdx, 128),
        topics=[clean_text(t, 100) for t in topics[:100]],
        language=_string(item, "language", 64),
        is_fork=item["fork"],
        archived=_flag(item, "archived"),
        size_kb=_count(item, "size"),
        default_branch=_string(item, "default_branch", 256),
        created_at=created,
        pushed_at=pushed,
        extra={"node_id": node_id} if node_id else {},
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

        full_name = str(repo.full_name)
        if not FULL_NAME.fullmatch(full_name):
            raise GitHubError("malformed_name", f"{full_name[:200]!r} is not owner/name")
        branch = str(repo.default_branch or "HEAD")
        if ".." in branch or any(ord(c) < 32 for c in branch):
            raise GitHubError("malformed_name", f"default branch {branch[:200]!r} is not a plain ref")
        resp = self.client.request("GET", f"repos/{full_name}/commits/{quote(branch, safe='/')}")
        sha = resp.data.get("sha") if isinstance(resp.data, dict) else None
        if not isinstance(sha, str) or not _SHA.fullmatch(sha):
            raise GitHubError(
                "malformed_response",
                f"commit answer for {full_name} has no hexadecimal sha ({str(sha)[:60]!r})",
            )
        tar = self.client.request("GET", f"repos/{full_name}/tarball/{sha}", raw=True)
        workdir.mkdir(parents=True, exist_ok=True)
        path = workdir / f"{repo.full_name.replace('/', '__')}-{sha[:12]}.tar.gz"
        path.write_bytes(tar.data)
        return FetchedSnapshot(commit=sha, path=path, kind="tar.gz")

    def readmes(self, full_names: list[str]) -> dict[str, str | None]:
        """READMEs of the repositories that survived the cheap filters (GraphQL batches)."""
        return self.client.readmes(full_names)
