"""Broken external answers: GitHub, the LLM server, sample sdists and local folders that misbehave.

Each test puts a real server on 127.0.0.1 (``tests/fakes/scripted_http.py``, which can send what no
well-behaved server sends) or a real file in front of the code and checks the rule: a clear reason,
recorded; the rest goes on; nothing lost; no secret leaked; no request off the configured host.
"""

from __future__ import annotations

import io
import json
import logging
import os
import tarfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from pydantic import BaseModel
from sqlalchemy import select

from scicodepile.crawl.stage import run_crawl_stage
from scicodepile.db import migrate, session_scope
from scicodepile.db.models import LLMCacheEntry, Rejection, Repository, SearchPartition
from scicodepile.errors import ConfigError
from scicodepile.llm import LLMResult, LLMUnavailable, get_llm
from scicodepile.runner import RunContext
from scicodepile.settings import Settings, load_settings
from scicodepile.sources.github import GitHubClient, GitHubError, GitHubSource
from tests.fakes.scripted_http import Answer, Request, ScriptedHTTP
from tests.fakes.tgi_server import FakeTGI
from tests.support.services import postgres_database

pytestmark = pytest.mark.integration

TOKEN = "ghp_SECRET_do_not_leak_0123456789"


def item(i: int, **over: Any) -> dict[str, Any]:
    base = {
        "id": 1000 + i,
        "node_id": f"R_{i}",
        "full_name": f"owner{i}/repo-{i}",
        "html_url": f"https://github.com/owner{i}/repo-{i}",
        "description": f"solver {i}",
        "fork": False,
        "created_at": "2020-01-01T00:00:00Z",
        "pushed_at": "2021-01-01T00:00:00Z",
        "stargazers_count": 10 + i,
        "forks_count": 1,
        "size": 10,
        "language": "Python",
        "archived": False,
        "default_branch": "main",
        "topics": ["chemistry"],
        "license": {"key": "mit", "spdx_id": "MIT"},
        "owner": {"login": f"owner{i}"},
    }
    base.update(over)
    return base


def page(items: list[Any], total: int | None = None, **extra: Any) -> dict[str, Any]:
    return {"total_count": len(items) if total is None else total, "incomplete_results": False,
            "items": items, **extra}  # fmt: skip


def gh_settings(tmp_path: Path, url: str, **over: Any) -> Settings:
    values: dict[str, Any] = {
        "var_dir": tmp_path / "var",
        "github_api_url": url,
        "github_token": TOKEN,
        "github_backoff_s": 0.001,
        "github_secondary_wait_s": 0.01,
        "github_rate_margin_s": 0.0,
        "github_max_retries": 3,
    }
    values.update(over)
    return load_settings(**values)


class Sleeps:
    """Recorded instead of slept: waits are checked, not spent."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


def client_for(tmp_path: Path, url: str, **over: Any) -> tuple[GitHubClient, Sleeps]:
    sleeps = Sleeps()
    return GitHubClient(gh_settings(tmp_path, url, **over), sleep=sleeps), sleeps


def no_token_anywhere(srv: ScriptedHTTP) -> bool:
    return all(TOKEN not in json.dumps(r.headers) for r in srv.log)


# ------------------------------------------------------------------------------------ GitHub client
@pytest.mark.parametrize(
    "answer, reason",
    [
        (Answer(200, "<html><body>Unicorn! 500</body></html>", content_type="text/html"), "malformed_json"),
        (Answer.json_body([item(1)]), "malformed_response"),
        (Answer.json_body(None), "malformed_response"),
        (Answer.json_body({"total_count": 1, "items": {"0": item(1)}}), "malformed_response"),
        (Answer.json_body({"total_count": "many", "items": [item(1)]}), "malformed_response"),
        (Answer.json_body({"total_count": -5, "items": [item(1)]}), "malformed_response"),
        (
            Answer(
                200,
                b'{"total_count": 1, "items": [',
            ),
            "malformed_json",
        ),
        (Answer(200, b"\xff\xfe{not utf8}"), "malformed_json"),
        (Answer(200, json.dumps(page([item(1)])), gzip_corrupt=True), "malformed_body"),
    ],
    ids=[
        "html-200",
        "list",
        "null",
        "items-object",
        "total-string",
        "total-negative",
        "truncated-json",
        "non-utf8",
        "gzip-corrupt",
    ],
)
def test_a_broken_search_answer_is_a_github_error_with_a_reason(
    tmp_path: Path, answer: Answer, reason: str
) -> None:
    with ScriptedHTTP({"/search/repositories": lambda r: answer}) as srv:
        client, _ = client_for(tmp_path, srv.url)
        with pytest.raises(GitHubError) as err:
            client.search_repositories("solver")
        assert err.value.reason == reason, str(err.value)
        assert srv.count("/search/repositories") <= 4  # bounded: never retried forever
        assert TOKEN not in str(err.value)


def test_a_body_cut_short_is_retried_and_then_read(tmp_path: Path) -> None:
    answers = iter(
        [Answer(200, json.dumps(page([item(1)])), truncate_to=20), Answer.json_body(page([item(1)]))]
    )
    with ScriptedHTTP({"/search/repositories": lambda r: next(answers)}) as srv:
        client, _ = client_for(tmp_path, srv.url)
        got = client.search_repositories("solver")
        assert [i["id"] for i in got.items] == [1001] and srv.count("/search/repositories") == 2


def test_connection_dropped_then_answer(tmp_path: Path) -> None:
    answers = iter([Answer(drop=True), Answer.json_body(page([item(2)]))])
    with ScriptedHTTP({"/search/repositories": lambda r: next(answers)}) as srv:
        client, _ = client_for(tmp_path, srv.url)
        assert client.search_repositories("solver").items[0]["id"] == 1002


def test_an_enormous_answer_is_refused_without_reading_it_all(tmp_path: Path) -> None:
    huge = json.dumps(page([item(i, description="x" * 5000) for i in range(400)]))
    with ScriptedHTTP({"/search/repositories": lambda r: Answer(200, huge)}) as srv:
        client, _ = client_for(tmp_path, srv.url)
        client.max_json_bytes = 100_000
        with pytest.raises(GitHubError) as err:
            client.search_repositories("solver")
        assert err.value.reason == "response_too_large"


@pytest.mark.parametrize("where", ["link", "redirect"])
def test_the_token_never_leaves_the_configured_host(tmp_path: Path, where: str) -> None:
    with ScriptedHTTP({"/search/repositories": lambda r: Answer.json_body(page([item(9)]))}) as evil:
        evil_url = evil.url.replace("127.0.0.1", "localhost") + "/search/repositories?q=x&page=2"

        def route(req: Request) -> Answer:
            if where == "redirect":
                return Answer(301, b"", headers={"Location": evil_url})
            return Answer.json_body(page([item(1)], total=2), headers={"Link": f'<{evil_url}>; rel="next"'})

        with ScriptedHTTP({"/search/repositories": route}) as srv:
            client, _ = client_for(tmp_path, srv.url)
            with pytest.raises(GitHubError) as err:
                first = client.search_repositories("solver")
                client.search_repositories(url=first.next_url)
            assert err.value.reason == "off_base_url"
            assert evil.log == []  # not even an unauthenticated request
            assert no_token_anywhere(evil)


def test_a_redirect_within_the_api_is_followed(tmp_path: Path) -> None:
    moved = Answer(301, b"", headers={"Location": "/repositories/42/commits/main"})
    routes = {
        "/repos/old/name/commits/main": lambda r: moved,
        "/repositories/42/commits/main": lambda r: Answer.json_body({"sha": "a" * 40}),
    }
    with ScriptedHTTP(routes) as srv:
        client, _ = client_for(tmp_path, srv.url)
        assert client.request("GET", "repos/old/name/commits/main").data["sha"] == "a" * 40
        assert srv.log[-1].headers.get("authorization") == f"Bearer {TOKEN}"


def test_bad_credentials_name_the_setting_and_never_the_token(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    bad = Answer.json_body({"message": "Bad credentials"}, 401)
    with ScriptedHTTP({"/search/repositories": lambda r: bad, "/rate_limit": lambda r: bad}) as srv:
        client, _ = client_for(tmp_path, srv.url)
        for call in (client.prime, lambda: client.search_repositories("x")):
            with pytest.raises(ConfigError) as err:
                call()
            assert "SCICODEPILE_GITHUB_TOKEN" in str(err.value) and TOKEN not in str(err.value)
        assert TOKEN not in caplog.text and TOKEN not in repr(client)


@pytest.mark.parametrize("status", [404, 451, 410])
def test_a_missing_or_blocked_repository_is_one_clear_error(tmp_path: Path, status: int) -> None:
    with ScriptedHTTP({}) as srv:
        srv.routes["/repos/a/b/commits/main"] = lambda r: Answer.json_body(
            {"message": "Repository access blocked"}, status
        )
        client, _ = client_for(tmp_path, srv.url)
        with pytest.raises(GitHubError) as err:
            client.request("GET", "repos/a/b/commits/main")
        assert err.value.reason == f"http_{status}" and srv.count("/repos/a/b/commits/main") == 1


@pytest.mark.parametrize(
    "limit_answer",
    [
        Answer.json_body({"message": "You have exceeded a secondary rate limit."}, 403),
        Answer.json_body({"message": "Too many requests"}, 429),
        Answer(429, b""),
        Answer.json_body(
            {"message": "slow down"}, 403, headers={"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}
        ),
    ],
    ids=["secondary-no-retry-after", "429-message", "429-empty", "retry-after-http-date"],
)
def test_rate_limits_without_retry_after_are_waited_out(tmp_path: Path, limit_answer: Answer) -> None:
    answers = iter([limit_answer, Answer.json_body(page([item(3)]))])
    with ScriptedHTTP({"/search/repositories": lambda r: next(answers)}) as srv:
        client, sleeps = client_for(tmp_path, srv.url)
        assert client.search_repositories("x").items[0]["id"] == 1003
        assert sleeps.calls and all(0 < s <= 3600 for s in sleeps.calls)


@pytest.mark.parametrize(
    "reset_offset, retry_after",
    [
        (-10_000, None),
        (10 * 365 * 86400, None),
        (None, "99999999999"),
        (None, "inf"),
        (None, "nan"),
        (None, "-5"),
        ("garbage", None),
    ],
)
def test_absurd_reset_times_and_retry_afters_give_bounded_waits(
    tmp_path: Path, reset_offset: Any, retry_after: str | None
) -> None:
    import time as _time

    headers = {"X-RateLimit-Remaining": "0", "X-RateLimit-Limit": "30", "X-RateLimit-Resource": "search"}
    if reset_offset is not None:
        headers["X-RateLimit-Reset"] = (
            reset_offset if isinstance(reset_offset, str) else str(int(_time.time() + reset_offset))
        )
    if retry_after is not None:
        headers["Retry-After"] = retry_after
    answers = iter([Answer.json_body({"message": "API rate limit exceeded"}, 403, headers=headers),
                    Answer.json_body(page([item(4)]))])  # fmt: skip
    with ScriptedHTTP({"/search/repositories": lambda r: next(answers)}) as srv:
        client, sleeps = client_for(tmp_path, srv.url)
        assert client.search_repositories("x").items[0]["id"] == 1004
        assert all(0 <= s <= 3600 for s in sleeps.calls), sleeps.calls


@pytest.mark.parametrize(
    "body",
    [
        [],
        None,
        {"resources": []},
        {"resources": {"search": {"limit": "x", "remaining": None, "reset": "soon"}}},
        {"resources": {"search": "nope", "core": {"limit": 5000, "remaining": 0, "reset": 1e300}}},
    ],
)
def test_garbage_from_rate_limit_is_ignored(tmp_path: Path, body: Any) -> None:
    routes = {
        "/rate_limit": lambda r: Answer.json_body(body),
        "/search/repositories": lambda r: Answer.json_body(page([item(5)])),
    }
    with ScriptedHTTP(routes) as srv:
        client, sleeps = client_for(tmp_path, srv.url)
        client.prime()
        assert client.search_repositories("x").items[0]["id"] == 1005
        assert all(0 <= s <= 3600 for s in sleeps.calls)


def test_a_304_without_a_cached_copy_is_not_taken_for_an_answer(tmp_path: Path) -> None:
    answers = iter(
        [Answer(304, b""), Answer.json_body(page([item(6)]), headers={"ETag": '"e1"'}), Answer(304, b"")]
    )
    with ScriptedHTTP({"/search/repositories": lambda r: next(answers)}) as srv:
        client, _ = client_for(tmp_path, srv.url)
        assert client.search_repositories("x").items[0]["id"] == 1006
        again = client.search_repositories("x")  # a 304 for what we hold: the cached page
        assert again.items[0]["id"] == 1006 and srv.log[-1].headers.get("if-none-match") == '"e1"'


@pytest.mark.parametrize(
    "body",
    [
        None,
        [],
        {"data": []},
        {"data": {"r0": []}},
        {"data": {"r0": {"object": {"text": 5}}}},
        {"errors": [{"message": "Something went wrong"}]},
    ],
)
def test_garbage_graphql_readmes_are_none_not_a_crash(tmp_path: Path, body: Any) -> None:
    with ScriptedHTTP({"/graphql": lambda r: Answer.json_body(body)}) as srv:
        client, _ = client_for(tmp_path, srv.url)
        assert client.readmes(["a/b"]) == {"a/b": None}


@pytest.mark.parametrize("sha", [None, 5, "../../etc/passwd", "abc", ["a" * 40]])
def test_fetch_refuses_a_commit_that_is_not_a_sha(tmp_path: Path, sha: Any) -> None:
    with ScriptedHTTP({"/repos/a/b/commits/main": lambda r: Answer.json_body({"sha": sha})}) as srv:
        source = GitHubSource(gh_settings(tmp_path, srv.url))
        repo = type("R", (), {"full_name": "a/b", "default_branch": "main"})()
        with pytest.raises(GitHubError) as err:
            source.fetch(repo, tmp_path / "w")
        assert err.value.reason == "malformed_response" and srv.count("/repos/a/b/tarball/x") == 0
        assert not any("tarball" in r.path for r in srv.log)


# ------------------------------------------------------------------------------------- crawl stage
@pytest.fixture
def pg(tmp_path: Path) -> Iterator[str]:
    with postgres_database("scicodepile_bad") as url:
        yield url


BAD_ITEMS: list[tuple[Any, str | None]] = [
    (item(1, stargazers_count="12"), "malformed_field:stargazers_count"),
    (item(2, full_name=None), "missing_field:full_name"),
    (item(3, id="abc"), "malformed_field:id"),
    (item(4, owner=None, license=None, topics=None, description=None), None),
    (item(5, license="MIT"), "malformed_field:license"),
    (item(6, created_at="yesterday"), "malformed_field:created_at"),
    (item(7, pushed_at="9999-12-31T00:00:00Z"), "implausible_date:pushed_at"),
    (item(8, fork="false"), "malformed_field:fork"),
    (item(9, topics="chemistry"), "malformed_field:topics"),
    (item(10, description="nul\x00 byte, lone \ud800 surrogate"), None),
    (item(11, full_name="../../etc/passwd"), "malformed_field:full_name"),
    (item(12, stargazers_count=2**40), "malformed_field:stargazers_count"),
    ("not an item", "malformed_item"),
    (None, "malformed_item"),
    (item(13, forks_count="3"), "malformed_field:forks_count"),
    (item(14, created_at="2020-01-01", pushed_at="2021-06-01T12:00:00+02:00"), None),
    (item(15, description="x" * 100_000, language="L" * 500), None),  # stored, cut to the columns' size
    (item(16, description="y" * 100_000), None),
    (item(17, id=True), "malformed_field:id"),
    (item(18, topics=[{"name": "x"}]), "malformed_field:topics"),
]


def test_the_crawl_survives_every_kind_of_broken_answer(tmp_path: Path, pg: str) -> None:
    """Five queries, each answered badly in its own way; each fails or rejects alone, with a reason."""
    behaviours = ["bad_items", "link_loop", "off_host", "incomplete", "healthy"]
    assigned: dict[str, str] = {}
    calls: Counter[str] = Counter()
    with ScriptedHTTP({"/search/repositories": lambda r: Answer.json_body(page([item(99)]))}) as evil:
        evil_next = evil.url.replace("127.0.0.1", "localhost") + "/search/repositories?page=2"

        def route(req: Request) -> Answer:
            term = req.query["q"].split(" stars:")[0]
            kind = assigned.setdefault(term, behaviours[len(assigned) % len(behaviours)])
            calls[kind] += 1
            n = 100 + 10 * behaviours.index(kind)
            page2 = f"{srv.url}/search/repositories?{urlencode({**req.query, 'page': 2})}"
            if kind == "bad_items":
                return Answer.json_body(page([i for i, _ in BAD_ITEMS]))
            if kind == "link_loop":  # page 2's next is page 2 again
                return Answer.json_body(page([item(n)], total=50), headers={"Link": f'<{page2}>; rel="next"'})
            if kind == "off_host":
                return Answer.json_body(
                    page([item(n)], total=2), headers={"Link": f'<{evil_next}>; rel="next"'}
                )
            if kind == "incomplete":
                return Answer.json_body({**page([item(n)]), "incomplete_results": True})
            return Answer.json_body(page([item(n), item(n + 1)]))

        with ScriptedHTTP({"/search/repositories": route}) as srv:
            settings = load_settings(
                var_dir=tmp_path / "var", database_url=pg, github_api_url=srv.url, github_token=TOKEN,
                github_backoff_s=0.001, github_secondary_wait_s=0.01, github_max_retries=2,
                crawl_max_queries=5, crawl_since="2009-01-01",
            )  # fmt: skip
            migrate(settings)
            report = run_crawl_stage(
                RunContext(settings=settings, source="github", params={"until": "2026-11-01"})
            )
        assert evil.log == []
    assert sorted(assigned.values()) == sorted(behaviours)
    assert calls["incomplete"] == 2  # asked again once
    with session_scope(settings) as s:
        parts = {p.query_id: p for p in s.scalars(select(SearchPartition))}
        status = Counter((p.status, (p.last_error or "").split(":")[0]) for p in parts.values())
        rejections = Counter((r.subject_type, r.reason) for r in s.scalars(select(Rejection)))
        repos = {r.source_id: r for r in s.scalars(select(Repository))}
    assert status == Counter(
        {
            ("done", ""): 2,
            ("failed", "pagination_loop"): 1,
            ("failed", "off_base_url"): 1,
            ("failed", "incomplete_results"): 1,
        }
    )
    for _, reason in BAD_ITEMS:
        if reason:
            assert rejections[("search_item", reason)] >= 1, reason
    for kind in ("pagination_loop", "off_base_url", "incomplete_results"):
        assert rejections[("search_partition", kind)] == 1
    kept = {str(1000 + i) for i in (4, 10, 14, 15, 16)}
    assert kept <= set(repos)
    assert not {str(1000 + i) for i in (1, 5, 6, 7, 8, 9, 11, 12, 13, 18)} & set(repos)
    assert repos["1015"].language == "L" * 64
    assert "\x00" not in repos["1010"].description and "\ufffd" in repos["1010"].description
    assert len(repos["1016"].description) <= 20_000
    # what came before a failure is kept: the first pages of the loop, off-host and incomplete queries
    assert {"1110", "1120", "1130", "1140", "1141"} <= set(repos)
    assert report.rejected["partition_pagination_loop"] == 1
    assert report.rejected["partition_off_base_url"] == 1


# ---------------------------------------------------------------------------------------------- LLM
class Echo(BaseModel):
    echo: str
    length: int


GOOD = '{"echo": "a", "length": 1}'


def llm_settings(tmp_path: Path, url: str, **over: Any) -> Settings:
    values: dict[str, Any] = {
        "var_dir": tmp_path / "var",
        "llm_endpoints": url,
        "llm_backoff_base_s": 0.001,
        "llm_backoff_max_s": 0.01,
        "llm_request_timeout_s": 10.0,
        "llm_deadline_s": 30.0,
        "llm_max_reasks": 0,
        "llm_max_retries": 2,
        "llm_max_concurrency": 3,
        "llm_model": "m",
    }
    values.update(over)
    settings = load_settings(**values)
    migrate(settings)
    return settings


def ask(settings: Settings, texts: list[str]) -> list[LLMResult]:
    with get_llm(settings) as client:
        return client.structured_many("echo_test", [{"text": t} for t in texts], Echo, max_new_tokens=64)


def llm_rejections(settings: Settings) -> Counter[str]:
    with session_scope(settings) as s:
        return Counter(s.scalars(select(Rejection.reason).where(Rejection.stage == "llm")).all())


@pytest.mark.parametrize(
    "answer, reason",
    [
        (f"```json\n{GOOD}\n```", None),
        (f"{GOOD}\n\nI hope this helps! Let me know if you need anything else.", None),
        ('{"echo": "a", "length": 1, "confidence": 0.9, "notes": ["x"]}', None),
        ('{"echo": "a", "len', "llm_invalid_json"),
        (f"[{GOOD}]", "llm_invalid_json"),
        ("", "llm_invalid_json"),
        ('{"echo": ["a"], "length": "one"}', "llm_schema_mismatch"),
        ("{" * 3_000_000, "llm_invalid_json"),
        ("[" * 300_000, "llm_invalid_json"),
    ],
    ids=[
        "fenced",
        "trailing-prose",
        "extra-keys",
        "truncated",
        "array",
        "empty",
        "wrong-types",
        "huge",
        "deep",
    ],
)
def test_what_a_model_may_answer(tmp_path: Path, answer: str, reason: str | None) -> None:
    with FakeTGI(
        lambda req: answer if req["prompt"].count("<<<BEGIN") and "bad" in req["prompt"] else GOOD
    ) as tgi:
        settings = llm_settings(tmp_path, tgi.url)
        bad, good = ask(settings, ["bad", "good"])
        assert good.ok  # the rest goes on
        assert bad.ok == (reason is None) and bad.rejection_reason == reason
        if reason:
            assert llm_rejections(settings)[reason] == 1 and bad.rejection_detail
            assert tgi.calls == 2  # llm_max_reasks=0: one try each, no retry storm


def test_nul_bytes_and_lone_surrogates_in_an_answer_are_stored_on_postgres(tmp_path: Path, pg: str) -> None:
    answers = {
        "raw": '{"echo": "nul \x00 and \ud800", "length": "x"}',  # the characters themselves
        "escaped": '{"echo": "nul \\u0000 and \\ud800", "length": 1}',  # valid JSON escapes: a valid answer
    }
    with FakeTGI(lambda req: next(v for k, v in answers.items() if f"\n{k}\n" in req["prompt"])) as tgi:
        settings = llm_settings(tmp_path, tgi.url, database_url=pg)
        raw, escaped = ask(settings, ["raw", "escaped"])
        assert raw.rejection_reason == "llm_invalid_json" and escaped.ok
        with session_scope(settings) as s:
            row = s.scalars(select(Rejection).where(Rejection.stage == "llm")).one()
            assert "\ufffd" in (row.detail or "") and "\x00" not in (row.detail or "")
            cached = s.get(LLMCacheEntry, raw.cache_key)
            assert (
                cached is not None and cached.status == "rejected" and "\x00" not in (cached.response or "")
            )
        again = ask(settings, ["raw", "escaped"])
        assert all(r.cached for r in again) and tgi.calls == 2
        assert again[1].ok and again[1].value.echo.startswith("nul ")


def tgi_routes(generate: Any, info: Any = None) -> dict[str, Any]:
    routes = {"/generate": generate, "/health": lambda r: Answer(200, b"")}
    if info is not None:
        routes["/info"] = info
    return routes


@pytest.mark.parametrize(
    "info",
    [
        None,  # /info missing (404)
        lambda r: Answer(200, "<html>gateway</html>", content_type="text/html"),
        lambda r: Answer.json_body([{"max_concurrent_requests": 99}]),
        lambda r: Answer.json_body({"max_concurrent_requests": "99", "model_id": {"x": 1}}),
        lambda r: Answer.json_body({"max_concurrent_requests": True}),
        lambda r: Answer.json_body({"max_concurrent_requests": -4}),
    ],
    ids=["missing", "html", "list", "string", "bool", "negative"],
)
def test_concurrency_falls_back_to_the_setting_when_info_is_missing_or_garbage(
    tmp_path: Path, info: Any
) -> None:
    answer = Answer.json_body({"generated_text": GOOD, "details": {"finish_reason": "eos_token"}})
    with ScriptedHTTP(tgi_routes(lambda r: answer, info)) as srv:
        settings = llm_settings(tmp_path, srv.url)
        with get_llm(settings) as client:
            client.transport.probe()
            assert client.transport.capacity == 3  # llm_max_concurrency
            assert client.structured("echo_test", {"text": "a"}, Echo).ok


def test_an_error_body_in_a_200_validation_is_a_rejection_not_a_retry(tmp_path: Path) -> None:
    body = {
        "error": "Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096",
        "error_type": "validation",
    }
    with ScriptedHTTP(tgi_routes(lambda r: Answer.json_body(body))) as srv:
        settings = llm_settings(tmp_path, srv.url)
        (res,) = ask(settings, ["a"])
        assert res.rejection_reason == "llm_request_rejected" and "4096" in (res.rejection_detail or "")
        assert srv.count("/generate") == 1 and llm_rejections(settings)["llm_request_rejected"] == 1


def test_an_error_body_in_a_200_overloaded_is_retried(tmp_path: Path) -> None:
    answers = iter([Answer.json_body({"error": "Model is overloaded", "error_type": "overloaded"}),
                    Answer.json_body({"generated_text": GOOD})])  # fmt: skip
    with ScriptedHTTP(tgi_routes(lambda r: next(answers))) as srv:
        (res,) = ask(llm_settings(tmp_path, srv.url), ["a"])
        assert res.ok and srv.count("/generate") == 2


def test_a_server_that_keeps_answering_garbage_is_unavailable_with_the_reason(tmp_path: Path) -> None:
    html = Answer(200, "<html><h1>502 Bad Gateway</h1></html>", content_type="text/html")
    with ScriptedHTTP(tgi_routes(lambda r: html)) as srv:
        settings = llm_settings(tmp_path, srv.url)
        with pytest.raises(LLMUnavailable) as err:
            ask(settings, ["a"])
        assert "unreadable answer" in str(err.value) and srv.count("/generate") == 3  # bounded
        with session_scope(settings) as s:  # nothing cached: a later run asks again
            assert s.scalars(select(LLMCacheEntry)).first() is None


def test_a_streamed_answer_nobody_asked_for_is_read(tmp_path: Path) -> None:
    events = [
        {"token": {"id": 1, "text": GOOD[:10], "special": False}, "generated_text": None},
        {"token": {"id": 2, "text": GOOD[10:], "special": False}, "generated_text": GOOD,
         "details": {"finish_reason": "eos_token", "generated_tokens": 2}},
    ]  # fmt: skip
    sse = "".join(f"data: {json.dumps(e)}\n\n" for e in events)
    with ScriptedHTTP(tgi_routes(lambda r: Answer(200, sse, content_type="text/event-stream"))) as srv:
        (res,) = ask(llm_settings(tmp_path, srv.url), ["a"])
        assert res.ok and res.value == Echo(echo="a", length=1)


def test_an_answer_cut_off_at_max_tokens_says_so(tmp_path: Path) -> None:
    cut = Answer.json_body({"generated_text": '{"echo": "aaaa', "details": {"finish_reason": "length"}})
    with ScriptedHTTP(tgi_routes(lambda r: cut)) as srv:
        settings = llm_settings(tmp_path, srv.url, llm_max_reasks=1)
        (res,) = ask(settings, ["a"])
        assert res.rejection_reason == "llm_truncated" and "max_new_tokens=64" in (res.rejection_detail or "")
        assert srv.count("/generate") == 2 and llm_rejections(settings)["llm_truncated"] == 1


def test_bytes_that_are_not_utf8_are_judged_not_lost(tmp_path: Path) -> None:
    body = b'{"generated_text": "{\\"echo\\": \\"caf\xe9\\", \\"length\\": 4}"}'
    with ScriptedHTTP(tgi_routes(lambda r: Answer(200, body))) as srv:
        (res,) = ask(llm_settings(tmp_path, srv.url), ["a"])
        assert res.ok and res.value == Echo(echo="caf\ufffd", length=4) and srv.count("/generate") == 1


@pytest.mark.parametrize(
    "chat, reason",
    [
        ({"choices": []}, "llm_no_content"),
        ({"choices": [{"message": {"content": None}, "finish_reason": "content_filter"}]}, "llm_no_content"),
        ({"choices": [{"message": {"content": '{"echo": "a'}, "finish_reason": "length"}]}, "llm_truncated"),
    ],
    ids=["no-choices", "null-content", "length"],
)
def test_openai_route_answers_without_content(tmp_path: Path, chat: dict[str, Any], reason: str) -> None:
    def route(req: Request) -> Answer:
        if "bad" in json.dumps(req.json()):
            return Answer.json_body(chat)
        return Answer.json_body({"choices": [{"message": {"content": GOOD}, "finish_reason": "stop"}]})

    with ScriptedHTTP({"/v1/chat/completions": route}) as srv:
        settings = llm_settings(tmp_path, srv.url, llm_api="openai")
        bad, good = ask(settings, ["bad", "good"])
        assert good.ok and bad.rejection_reason == reason
        assert llm_rejections(settings)[reason] == 1 and srv.count("/v1/chat/completions") == 2


# ----------------------------------------------------------------------------- local and sample sources
def source_settings(tmp_path: Path, pg: str) -> Settings:
    settings = load_settings(var_dir=tmp_path / "var", database_url=pg)
    migrate(settings)
    return settings


def crawl_rejections(settings: Settings) -> dict[str, str]:
    with session_scope(settings) as s:
        return {
            r.subject_key: r.reason for r in s.scalars(select(Rejection).where(Rejection.stage == "crawl"))
        }


def test_a_hostile_local_folder(tmp_path: Path, pg: str) -> None:
    root = tmp_path / "mirror"
    root.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.json").write_text(json.dumps({"description": "leaked", "stars": 5}))
    with tarfile.open(outside / "elsewhere.tar.gz", "w:gz") as tar:
        info = tarfile.TarInfo("x/a.py")
        tar.addfile(info, io.BytesIO(b""))
    for name in ("good", "wrongtypes", "huge", "nested", "baddate", "nul", "linkedmeta", "neg", "future"):
        (root / name).mkdir()
        (root / name / "a.py").write_text("x = 1\n")
    meta = {
        "good": {
            "stars": 3,
            "topics": ["chemistry"],
            "description": "fine",
            "pushed_at": "2024-01-01T00:00:00Z",
        },
        "wrongtypes": {"stars": "3", "license": ["MIT"]},
        "nested": {"topics": [{"a": {"b": [1, 2]}}], "description": {"text": "x"}},
        "baddate": {"pushed_at": "last tuesday"},
        "nul": {"description": "nul \x00 here \ud800", "license": "MIT\x00"},
        "neg": {"stars": -1},
        "future": {"pushed_at": "9999-01-01T00:00:00Z"},
    }
    for name, value in meta.items():
        (root / f"{name}.metadata.json").write_text(json.dumps(value))
    (root / "huge.metadata.json").write_text(json.dumps({"description": "d" * (3 << 20)}))
    (root / "linkedmeta.metadata.json").symlink_to(outside / "secret.json")
    (root / "escape.tar.gz").symlink_to(outside / "elsewhere.tar.gz")  # an archive entry pointing outside
    (root / "linkdir").symlink_to(outside, target_is_directory=True)
    odd = "new\nline"
    (root / odd).mkdir()
    (root / odd / "a.py").write_text("")
    (root / ("n" * 250)).mkdir()
    if os.uname().sysname == "Linux":  # a name that is not UTF-8
        os.mkdir(os.fsencode(str(root)) + b"/caf\xe9")

    settings = source_settings(tmp_path, pg)
    report = run_crawl_stage(RunContext(settings=settings, source="local", path=root))
    with session_scope(settings) as s:
        repos = {r.source_id: r for r in s.scalars(select(Repository))}
    rejected = crawl_rejections(settings)
    kept = {
        "good",
        "wrongtypes",
        "huge",
        "nested",
        "baddate",
        "nul",
        "linkedmeta",
        "neg",
        "future",
        "n" * 250,
    }
    assert set(repos) == kept  # a bad metadata file loses the metadata, never the repository
    assert repos["good"].stars == 3 and repos["good"].topics == ["chemistry"]
    for name in ("wrongtypes", "huge", "nested", "baddate", "neg", "future", "linkedmeta"):
        assert rejected.get(f"{name}.metadata.json") == "invalid_metadata", name
    assert repos["linkedmeta"].description is None  # a symlinked metadata file is not read
    assert "\x00" not in (repos["nul"].description or "") and "\ufffd" in (repos["nul"].description or "")
    assert repos["baddate"].pushed_at is not None  # from the folder's mtime, not the bad value
    assert rejected.get("escape.tar.gz") == "symlink_entry"
    assert rejected.get("linkdir") == "symlink_entry"
    assert rejected.get("new\\nline") == "invalid_name"
    if os.uname().sysname == "Linux":
        assert rejected.get("caf\\udce9") == "invalid_name" or any(
            r == "invalid_name" for r in rejected.values()
        )
    assert report.kept == len(kept)


def _sdist(path: Path, pkg_info: bytes, name: str = "pkg-1.0") -> None:
    with tarfile.open(path, "w:gz") as tar:
        info = tarfile.TarInfo(f"{name}/PKG-INFO")
        info.size = len(pkg_info)
        tar.addfile(info, io.BytesIO(pkg_info))


def test_broken_sdists_are_rejected_one_by_one(tmp_path: Path, pg: str) -> None:
    settings = source_settings(tmp_path, pg)
    cache = settings.var_dir / "cache" / "sample"
    good = b"Metadata-Version: 2.1\nName: good\nVersion: 1.0\nSummary: fine\nLicense: MIT\n"
    entries = {
        "good": good,
        "latin": b"Metadata-Version: 2.1\nName: latin\nVersion: 1.0\nSummary: caf\xe9 \x00 \xff\xfe\n",
        "hugefield": b"Metadata-Version: 2.1\nName: hugefield\nVersion: 1.0\nSummary: "
        + b"s" * 900_000
        + b"\n",
        "hostile": b"Metadata-Version: 2.1\nName: ../../etc/passwd\nVersion: 1.0\nSummary: x\n",
    }
    for name, info in entries.items():
        (cache / f"{name}-1.0").mkdir(parents=True)
        _sdist(cache / f"{name}-1.0" / f"{name}-1.0.tar.gz", info, f"{name}-1.0")
    (cache / "garbage-1.0").mkdir()
    (cache / "garbage-1.0" / "garbage-1.0.tar.gz").write_bytes(b"this is not a tarball")
    (cache / "cut-1.0").mkdir()
    buf = tmp_path / "whole.tar.gz"
    _sdist(buf, good + b"Description: " + os.urandom(200_000).hex().encode() + b"\n", "cut-1.0")
    (cache / "cut-1.0" / "cut-1.0.tar.gz").write_bytes(buf.read_bytes()[:5000])  # a truncated gzip stream
    (cache / "noinfo-1.0").mkdir()
    with tarfile.open(cache / "noinfo-1.0" / "noinfo-1.0.tar.gz", "w:gz") as tar:
        tar.addfile(tarfile.TarInfo("noinfo-1.0/setup.py"), io.BytesIO(b""))
    manifest = tmp_path / "manifest.txt"
    names = [*entries, "garbage", "cut", "noinfo"]
    manifest.write_text("\n".join(f"{n}==1.0" for n in names) + "\nnot a requirement line\n")
    report = run_crawl_stage(RunContext(settings=settings, source="sample", manifest=manifest))
    with session_scope(settings) as s:
        repos = {r.source_id: r for r in s.scalars(select(Repository))}
    rejected = crawl_rejections(settings)
    assert set(repos) == {"good==1.0", "latin==1.0", "hugefield==1.0", "hostile==1.0"}
    assert "\x00" not in (repos["latin==1.0"].description or "")
    assert len(repos["hugefield==1.0"].description or "") <= 20_000
    assert repos["hostile==1.0"].full_name == "hostile"  # the manifest's name, not the sdist's claim
    assert rejected["garbage==1.0"] == "bad_sdist" and rejected["cut==1.0"] == "bad_sdist"
    assert rejected["noinfo==1.0"] == "bad_sdist"
    assert "invalid_manifest_line" in rejected.values()
    assert report.kept == 4


def _git(folder: Path, *args: str) -> None:
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t.org",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t.org"}  # fmt: skip
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, env=env)


def test_a_local_git_repository_cannot_run_commands_or_point_elsewhere(tmp_path: Path, pg: str) -> None:
    from scicodepile.sources import get_source

    root = tmp_path / "mirror"
    evil = root / "evil"
    evil.mkdir(parents=True)
    (evil / "model.py").write_text("x = 1\n")
    (evil / ".gitattributes").write_text("* filter=pwn\n")
    _git(evil, "init", "-q")
    _git(evil, "add", ".")
    _git(evil, "commit", "-q", "-m", "one")
    marker = tmp_path / "PWNED"
    _git(evil, "config", "filter.pwn.smudge", f"touch {marker}; cat")
    other = tmp_path / "private"
    other.mkdir()
    (other / "secret.txt").write_text("s")
    _git(other, "init", "-q")
    _git(other, "add", ".")
    _git(other, "commit", "-q", "-m", "private")
    pointer = root / "pointer"
    pointer.mkdir()
    (pointer / ".git").write_text(f"gitdir: {other / '.git'}\n")  # a .git file: another repository

    settings = source_settings(tmp_path, pg)
    ctx = RunContext(settings=settings, source="local", path=root)
    run_crawl_stage(ctx)
    with session_scope(settings) as s:
        repos = {r.source_id: r for r in s.scalars(select(Repository))}
    assert repos["evil"].extra["kind"] == "git" and repos["pointer"].extra["kind"] == "dir"
    source = get_source("local", ctx)
    snap = source.fetch(repos["evil"], tmp_path / "work")
    assert not marker.exists()  # the repository's filter command never ran
    with tarfile.open(snap.path) as tar:
        assert tar.extractfile("model.py").read() == b"x = 1\n"
    pointed = source.fetch(repos["pointer"], tmp_path / "work")
    assert pointed.kind == "dir" and pointed.path == pointer  # the folder itself, not the other repository


def test_llm_query_expansion_garbage_is_recorded_and_the_synonym_table_fills_in(
    tmp_path: Path, pg: str
) -> None:
    from scicodepile.crawl.stage import ensure_queries

    def responder(req: dict[str, Any]) -> str:
        if "chemistry" in req["prompt"].lower() and "numerical" not in req["prompt"].lower():
            return "[]"  # not an object: this chunk falls back to the synonym table
        return json.dumps(
            {
                "queries": [
                    {"seed": "nul\x00seed", "query": "evil\x00 query"},
                    {"seed": "x", "query": "a OR b stars:>1"},
                ]
            }
        )

    with FakeTGI(responder) as tgi:
        settings = llm_settings(
            tmp_path, tgi.url, database_url=pg, llm_model="", crawl_max_queries=40, llm_max_reasks=0
        )
        queries = ensure_queries(RunContext(settings=settings, source="github"))
    assert len(queries) == 40 and all("\x00" not in q.text for _, q in queries)
    reasons = crawl_rejections(settings)
    assert "query_unknown_seed" in reasons.values() and "llm_expansion_rejected" in reasons.values()
    assert all("\x00" not in key for key in reasons)
