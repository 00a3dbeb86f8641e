"""A local HTTP server that speaks GitHub's search API, for tests and the crawl benchmark.

It is a real server on 127.0.0.1 (``ThreadingHTTPServer``), not a mock: the crawler talks to it over
HTTP exactly as to api.github.com.  It holds a generated population of repositories and enforces what
GitHub enforces on ``GET /search/repositories``: the 1,000-result cap (pages past it are a 422),
``per_page``/``page`` with ``Link`` headers, the search rate limit (30/min with a token, 10 without)
with ``X-RateLimit-*`` headers on a clock that can be scaled (``time_scale=30`` makes a minute last 2 s;
reset times and ``Retry-After`` are then fractional seconds), secondary-limit 403s with
``Retry-After``, ETag/304.  It can inject faults: random 502s, random secondary limits, malformed JSON
or a 422 for queries containing given words, items missing a field; ``scripted_faults`` puts a 502 or
a secondary limit on the n-th search request.  Also ``/rate_limit``,
``/repos/{o}/{r}``, ``/repos/{o}/{r}/commits/{ref}``, ``/repos/{o}/{r}/tarball/{ref}`` and a minimal
GraphQL endpoint for README batches.

Accounting for tests: ``log`` (every request: time, path, query, page, status), ``avoidable`` (requests
refused by the primary limit or sent during a ``Retry-After`` period: a well-behaved client makes
none), ``secondary`` (injected secondary limits), ``count_search_ok``.
"""

from __future__ import annotations

import hashlib
import io
import json
import random
import re
import tarfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

LICENSES = [
    ("mit", "MIT"),
    ("apache-2.0", "Apache-2.0"),
    ("bsd-3-clause", "BSD-3-Clause"),
    ("gpl-3.0", "GPL-3.0"),
    ("other", "NOASSERTION"),
    (None, None),
]
_QUAL = re.compile(r"(\w+):(\S+)")


def _iso(d: datetime) -> str:
    return d.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _parse_bound(text: str) -> datetime:
    text = text.replace("Z", "+00:00")
    d = datetime.fromisoformat(text) if "T" in text else datetime.fromisoformat(text + "T00:00:00+00:00")
    return d if d.tzinfo else d.replace(tzinfo=UTC)


@dataclass
class Repo:
    id: int
    full_name: str
    description: str
    topics: list[str]
    stars: int
    fork: bool
    archived: bool
    license: tuple[str | None, str | None]
    created_at: datetime
    pushed_at: datetime
    language: str = "Python"

    @property
    def text(self) -> str:
        return f"{self.full_name.lower()} {self.description.lower()} {' '.join(self.topics)}"

    def to_item(self) -> dict[str, Any]:
        owner, name = self.full_name.split("/")
        key, spdx = self.license
        return {
            "id": self.id,
            "node_id": f"R_{self.id}",
            "name": name,
            "full_name": self.full_name,
            "private": False,
            "owner": {"login": owner, "id": self.id % 9973, "type": "User"},
            "html_url": f"https://github.com/{self.full_name}",
            "description": self.description,
            "fork": self.fork,
            "url": f"https://api.github.com/repos/{self.full_name}",
            "created_at": _iso(self.created_at),
            "updated_at": _iso(self.pushed_at),
            "pushed_at": _iso(self.pushed_at),
            "homepage": None,
            "size": 100 + self.id % 5000,
            "stargazers_count": self.stars,
            "watchers_count": self.stars,
            "language": self.language,
            "forks_count": self.stars // 7,
            "archived": self.archived,
            "disabled": False,
            "open_issues_count": self.id % 13,
            "license": None if key is None else {"key": key, "name": key.upper(), "spdx_id": spdx},
            "topics": list(self.topics),
            "visibility": "public",
            "default_branch": "main",
            "score": 1.0,
        }


def generate_population(
    terms: list[str],
    n: int = 5000,
    seed: int = 0,
    *,
    start: datetime = datetime(2009, 1, 1, tzinfo=UTC),
    end: datetime = datetime(2026, 11, 1, tzinfo=UTC),
    zipf: float = 1.0,
) -> list[Repo]:
    """``n`` repositories whose descriptions use ``terms`` (popular terms first, Zipf weights).

    Creation dates grow towards the present (like GitHub); each repo mentions one or two terms.
    """
    rng = random.Random(seed)
    weights = [1.0 / (i + 1) ** zipf for i in range(len(terms))]
    span = (end - start).total_seconds()
    repos: list[Repo] = []
    for i in range(n):
        chosen = set(rng.choices(terms, weights, k=1 + (rng.random() < 0.3)))
        created = start + timedelta(seconds=int(span * rng.random() ** 0.5))
        pushed = created + timedelta(seconds=int((end - created).total_seconds() * rng.random()))
        phrase = " and ".join(sorted(chosen))
        repos.append(
            Repo(
                id=100000 + i * 7 + rng.randrange(7),
                full_name=f"user{rng.randrange(3000)}/proj-{i}",
                description=f"A toolkit for {phrase} research",
                topics=[t.replace(" ", "-") for t in sorted(chosen)][:3],
                stars=int(rng.paretovariate(1.2)) - 1 + (rng.random() < 0.5) * rng.randrange(40),
                fork=rng.random() < 0.08,
                archived=rng.random() < 0.04,
                license=rng.choice(LICENSES),
                created_at=created,
                pushed_at=pushed,
            )
        )
    return repos


@dataclass
class SearchQuery:
    phrases: list[str]
    min_stars: int | None = None
    fork: bool | None = None
    windows: dict[str, tuple[datetime, datetime]] = field(default_factory=dict)

    def matches(self, repo: Repo) -> bool:
        text = repo.text
        if not all(p in text or p.replace(" ", "-") in text for p in self.phrases):
            return False
        if self.min_stars is not None and repo.stars < self.min_stars:
            return False
        if self.fork is False and repo.fork:
            return False
        for name, (lo, hi) in self.windows.items():
            value = repo.created_at if name == "created" else repo.pushed_at
            if not lo <= value <= hi:
                return False
        return True


def parse_search(q: str) -> SearchQuery:
    """The subset of GitHub's search syntax the crawler uses; raises ValueError on invalid input."""
    if q.count('"') % 2:
        raise ValueError("unbalanced quotes")
    phrases = [p.lower() for p in re.findall(r'"([^"]+)"', q)]
    rest = re.sub(r'"[^"]*"', " ", q)
    out = SearchQuery(phrases)
    for word in rest.split():
        m = _QUAL.fullmatch(word)
        if not m:
            out.phrases.append(word.lower())
            continue
        name, value = m.groups()
        if name == "stars":
            if not value.startswith(">="):
                raise ValueError(f"unsupported stars qualifier {value}")
            out.min_stars = int(value[2:])
        elif name == "fork":
            out.fork = value == "true"
        elif name in ("created", "pushed"):
            lo, sep, hi = value.partition("..")
            if not sep:
                raise ValueError(f"unsupported {name} qualifier {value}")
            out.windows[name] = (_parse_bound(lo), _parse_bound(hi))
        else:
            raise ValueError(f"unknown qualifier {name}")
    if not out.phrases:
        raise ValueError("no search terms")
    return out


@dataclass
class Limiter:
    limit: int
    window: float
    reset: float = 0.0
    used: int = 0

    def roll(self, now: float) -> None:
        if now >= self.reset:
            # windows follow each other without gaps from the first request on (a fixed schedule)
            if self.reset == 0.0:
                self.reset = now + self.window
            else:
                while self.reset <= now:
                    self.reset += self.window
            self.used = 0


class FakeGitHub:
    """The server; use as a context manager.  ``url`` is its base URL."""

    def __init__(
        self,
        population: list[Repo],
        *,
        time_scale: float = 1.0,
        search_limit: int | None = None,
        core_limit: int = 5000,
        secondary_rate: float = 0.0,
        error_rate: float = 0.0,
        secondary_retry_s: float = 60.0,
        malformed_terms: tuple[str, ...] = (),
        invalid_terms: tuple[str, ...] = (),
        missing_field_ids: tuple[int, ...] = (),
        token: str | None = "test-token",
        seed: int = 1,
        latency: float = 0.0,
        scripted_faults: dict[int, str] | None = None,
    ) -> None:
        self.population = sorted(population, key=lambda r: (-r.stars, r.id))
        self.by_name = {r.full_name: r for r in population}
        self.time_scale = time_scale
        self.token = token
        self.search_limit = search_limit
        self.core = Limiter(core_limit, 3600 / time_scale)
        self.limiters: dict[bool, Limiter] = {}
        self.secondary_rate, self.error_rate = secondary_rate, error_rate
        self.secondary_retry = secondary_retry_s / time_scale
        self.malformed_terms, self.invalid_terms = malformed_terms, invalid_terms
        self.missing_field_ids = set(missing_field_ids)
        self.latency = latency
        self.scripted = dict(scripted_faults or {})  # {nth search request (1-based): "502" | "secondary"}
        self.search_count = 0
        self.version = 0
        self._matches: dict[tuple[str, int], list[Repo]] = {}
        self.rng = random.Random(seed)
        self.lock = threading.Lock()
        self.log: list[dict[str, Any]] = []
        self.avoidable = 0
        self.secondary = 0
        self.penalty_until = 0.0
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------------------- lifecycle
    def __enter__(self) -> FakeGitHub:
        handler = type("Handler", (_Handler,), {"fake": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.shutdown()
        self._server.server_close()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    # ----------------------------------------------------------------------------- accounting
    def expected(self, phrases: list[str], min_stars: int, include_forks: bool = False) -> set[int]:
        """Ids of every repository some query should find (the crawl's target set)."""
        out: set[int] = set()
        for phrase in phrases:
            sq = SearchQuery([phrase.lower()], min_stars, None if include_forks else False)
            out.update(r.id for r in self.population if sq.matches(r))
        return out

    def matches(self, q: str, sq: SearchQuery) -> list[Repo]:
        """Matching repositories in best-match order, memoised per query string (pages reuse it)."""
        key = (q, self.version)
        with self.lock:
            hit = self._matches.get(key)
        if hit is None:
            hit = [r for r in self.population if sq.matches(r)]
            with self.lock:
                self._matches[key] = hit
        return hit

    def touch(self) -> None:
        """Call after changing the population (e.g. a repository's pushed_at): drops memoised matches."""
        with self.lock:
            self.version += 1
            self._matches.clear()

    def search_ok(self) -> list[dict[str, Any]]:
        return [e for e in self.log if e["path"] == "/search/repositories" and e["status"] == 200]

    def limiter(self, authed: bool) -> Limiter:
        if authed not in self.limiters:
            limit = self.search_limit or (30 if authed else 10)
            self.limiters[authed] = Limiter(limit, 60 / self.time_scale)
        return self.limiters[authed]

    def tarball(self, repo: Repo, sha: str) -> bytes:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for name, text in (
                ("README.md", f"# {repo.full_name}\n\n{repo.description}\n"),
                ("src/model.py", f"def solve(x):\n    return x * {repo.id % 97}\n"),
            ):
                data = text.encode()
                info = tarfile.TarInfo(f"{repo.full_name.replace('/', '-')}-{sha[:7]}/{name}")
                info.size = len(data)
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()


class _Handler(BaseHTTPRequestHandler):
    fake: FakeGitHub
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    # --------------------------------------------------------------------------------- helpers
    def _send(
        self,
        status: int,
        body: bytes | dict | list,
        headers: dict[str, str] | None = None,
        content_type: str = "application/json; charset=utf-8",
    ) -> None:
        if isinstance(body, dict | list):
            body = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _authed(self) -> bool | None:
        auth = self.headers.get("Authorization")
        if auth is None:
            return False
        if self.fake.token is not None and auth != f"Bearer {self.fake.token}":
            return None
        return True

    def _rate_headers(self, lim: Limiter, resource: str) -> dict[str, str]:
        fmt = (lambda x: f"{x:.3f}") if self.fake.time_scale != 1 else (lambda x: str(int(x)))
        return {
            "X-RateLimit-Limit": str(lim.limit),
            "X-RateLimit-Remaining": str(max(lim.limit - lim.used, 0)),
            "X-RateLimit-Reset": fmt(lim.reset),
            "X-RateLimit-Used": str(lim.used),
            "X-RateLimit-Resource": resource,
        }

    def _record(self, path: str, status: int, **extra: Any) -> None:
        self.fake.log.append({"t": time.time(), "path": path, "status": status, **extra})

    # ---------------------------------------------------------------------------------- routes
    def do_GET(self) -> None:
        parts = urlsplit(self.path)
        authed = self._authed()
        if authed is None:
            self._record(parts.path, 401)
            self._send(401, {"message": "Bad credentials"})
            return
        if self.fake.latency:
            time.sleep(self.fake.latency)
        if parts.path == "/search/repositories":
            self._search(parts.query, authed)
        elif parts.path == "/rate_limit":
            self._rate_limit(authed)
        elif parts.path.startswith("/repos/"):
            self._repos(parts.path)
        else:
            self._send(404, {"message": "Not Found"})

    def do_POST(self) -> None:
        parts = urlsplit(self.path)
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length)
        if parts.path != "/graphql":
            self._send(404, {"message": "Not Found"})
            return
        fake = self.fake
        with fake.lock:
            now = time.time()
            fake.core.roll(now)
            fake.core.used += 1
        query = json.loads(body or b"{}").get("query", "")
        data: dict[str, Any] = {}
        for alias, owner, name in re.findall(
            r'(\w+): repository\(owner: "([^"]*)", name: "([^"]*)"\)', query
        ):
            repo = fake.by_name.get(f"{owner}/{name}")
            data[alias] = (
                None if repo is None else {"object": {"text": f"# {repo.full_name}\n{repo.description}"}}
            )
        self._record(parts.path, 200)
        self._send(200, {"data": data})

    def _rate_limit(self, authed: bool) -> None:
        fake = self.fake
        with fake.lock:
            now = time.time()
            lim = fake.limiter(authed)
            lim.roll(now)
            fake.core.roll(now)
            res = {
                name: {"limit": lm.limit, "remaining": lm.limit - lm.used, "reset": lm.reset, "used": lm.used}
                for name, lm in (("search", lim), ("core", fake.core))
            }
        self._record("/rate_limit", 200)
        self._send(200, {"resources": res, "rate": res["core"]})

    def _repos(self, path: str) -> None:
        fake = self.fake
        m = re.fullmatch(r"/repos/([^/]+)/([^/]+)(?:/(commits|tarball|readme)(?:/(.+))?)?", path)
        repo = fake.by_name.get(f"{m.group(1)}/{m.group(2)}") if m else None
        with fake.lock:
            now = time.time()
            fake.core.roll(now)
            fake.core.used += 1
            headers = self._rate_headers(fake.core, "core")
        if repo is None:
            self._record(path, 404)
            self._send(404, {"message": "Not Found"}, headers)
            return
        sha = hashlib.sha1(f"{repo.id}:{_iso(repo.pushed_at)}".encode()).hexdigest()
        kind = m.group(3)
        self._record(path, 200)
        if kind is None:
            self._send(200, repo.to_item(), headers)
        elif kind == "commits":
            self._send(200, {"sha": sha, "commit": {"message": "latest"}}, headers)
        elif kind == "tarball":
            self._send(200, fake.tarball(repo, sha), headers, content_type="application/x-gzip")
        else:
            self._send(200, f"# {repo.full_name}\n".encode(), headers, content_type="text/plain")

    def _search(self, query: str, authed: bool) -> None:
        fake = self.fake
        params = {k: v[-1] for k, v in parse_qs(query).items()}
        q = params.get("q", "")
        try:
            per_page = min(int(params.get("per_page", 30)), 100)
            page = int(params.get("page", 1))
        except ValueError:
            per_page, page = -1, -1
        entry: dict[str, Any] = {"q": q, "page": page}
        with fake.lock:
            now = time.time()
            lim = fake.limiter(authed)
            lim.roll(now)
            entry["window_reset"] = lim.reset  # which rate window the request fell in
            if now < fake.penalty_until:  # ignoring Retry-After is avoidable
                fake.avoidable += 1
                wait = fake.penalty_until - now
                self._record("/search/repositories", 403, kind="during_retry_after", **entry)
                self._send(
                    403,
                    {"message": "You have exceeded a secondary rate limit."},
                    {**self._rate_headers(lim, "search"), "Retry-After": f"{wait:.3f}"},
                )
                return
            if lim.used >= lim.limit:
                fake.avoidable += 1
                self._record("/search/repositories", 403, kind="primary", **entry)
                self._send(
                    403,
                    {
                        "message": "API rate limit exceeded for user ID 1.",
                        "documentation_url": "https://docs.github.com/rest/rate-limit",
                    },
                    self._rate_headers(lim, "search"),
                )
                return
            lim.used += 1
            headers = self._rate_headers(lim, "search")
            roll = fake.rng.random()
            fake.search_count += 1
            scripted = fake.scripted.get(fake.search_count)
            if scripted == "502":
                roll = 0.0 if fake.error_rate == 0 else min(roll, fake.error_rate / 2)
            elif scripted == "secondary":
                roll = fake.error_rate + fake.secondary_rate / 2 if fake.secondary_rate else -1.0
            if scripted == "502" or (scripted is None and roll < fake.error_rate):
                self._record("/search/repositories", 502, **entry)
                self._send(502, b"<html><body><h1>502 Bad Gateway</h1></body></html>", headers, "text/html")
                return
            if scripted == "secondary" or (scripted is None and roll < fake.error_rate + fake.secondary_rate):
                fake.secondary += 1
                fake.penalty_until = now + fake.secondary_retry
                self._record("/search/repositories", 403, kind="secondary", **entry)
                self._send(
                    403,
                    {
                        "message": "You have exceeded a secondary rate limit. Please wait a few minutes "
                        "before you try again."
                    },
                    {**headers, "Retry-After": f"{fake.secondary_retry:.3f}"},
                )
                return
        try:
            if per_page < 1 or page < 1:
                raise ValueError("per_page and page must be positive integers")
            sq = parse_search(q)
            if any(t in p for t in fake.invalid_terms for p in sq.phrases):
                raise ValueError("the search contains an invalid term")
        except ValueError as exc:
            self._record("/search/repositories", 422, **entry)
            self._send(
                422,
                {
                    "message": "Validation Failed",
                    "errors": [{"resource": "Search", "field": "q", "code": "invalid", "message": str(exc)}],
                    "documentation_url": "https://docs.github.com/v3/search/",
                },
                headers,
            )
            return
        if (page - 1) * per_page >= 1000:
            self._record("/search/repositories", 422, **entry)
            self._send(
                422,
                {
                    "message": "Only the first 1000 search results are available",
                    "documentation_url": "https://docs.github.com/v3/search/",
                },
                headers,
            )
            return
        matches = fake.matches(q, sq)
        reachable = matches[:1000]
        items = []
        for r in reachable[(page - 1) * per_page : page * per_page]:
            item = r.to_item()
            if r.id in fake.missing_field_ids:
                item.pop("stargazers_count")
            items.append(item)
        body = json.dumps({"total_count": len(matches), "incomplete_results": False, "items": items}).encode()
        if any(t in p for t in fake.malformed_terms for p in sq.phrases):
            body = body[: len(body) // 2]  # a truncated answer
        last_page = max(1, -(-len(reachable) // per_page))
        links = []
        base = f"http://{self.headers.get('Host')}/search/repositories?"

        def link(p: int, rel: str) -> str:
            return f'<{base}{urlencode({"q": q, "per_page": per_page, "page": p})}>; rel="{rel}"'

        if page < last_page:
            links += [link(page + 1, "next"), link(last_page, "last")]
        if page > 1:
            links += [link(1, "first"), link(page - 1, "prev")]
        etag = 'W/"' + hashlib.sha256(body).hexdigest()[:32] + '"'
        if links:
            headers["Link"] = ", ".join(links)
        headers["ETag"] = etag
        if self.headers.get("If-None-Match") == etag:
            self._record("/search/repositories", 304, **entry)
            self._send(304, b"", headers)
            return
        self._record("/search/repositories", 200, total=len(matches), n=len(items), **entry)
        self._send(200, body, headers)


__all__ = ["FakeGitHub", "Repo", "generate_population", "parse_search"]
