"""The LLM client against a local server speaking TGI's API over real HTTP (tests/fakes/tgi_server.py).

Must show (issue "LLM layer"): garbage is retried then rejected with a reason and its raw text; 429,
503 and dropped connections are retried and the run completes; a rerun makes zero new calls (counted
on the server); concurrency never exceeds the server's cap.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import select

from scicodepile.db import migrate, session_scope
from scicodepile.db.models import LLMCacheEntry, Rejection
from scicodepile.llm import LLMResult, LLMUnavailable, get_llm
from scicodepile.settings import Settings, load_settings
from scicodepile.store import open_store
from tests.fakes.tgi_server import FakeTGI
from tests.support.services import free_port

pytestmark = pytest.mark.integration


class Echo(BaseModel):
    echo: str
    length: int


def echo_responder(request: dict[str, Any]) -> str:
    """Answers like a well-behaved model would: the text between the markers, as JSON."""
    lines = request["prompt"].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("<<<BEGIN UNTRUSTED TEXT"))
    text = lines[start + 1]
    return json.dumps({"echo": text, "length": len(text)})


def make_settings(tmp_path: Path, *urls: str, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "var_dir": tmp_path / "var",
        "llm_endpoints": ",".join(urls),
        "llm_backoff_base_s": 0.01,
        "llm_backoff_max_s": 0.05,
        "llm_request_timeout_s": 10.0,
        "llm_deadline_s": 60.0,
    }
    values.update(overrides)
    settings = load_settings(**values)
    migrate(settings)
    return settings


def ask(settings: Settings, texts: list[str], role: str = "default") -> list[LLMResult]:
    with get_llm(settings, role=role) as client:  # type: ignore[arg-type]
        return client.structured_many("echo_test", [{"text": t} for t in texts], Echo, max_new_tokens=64)


def test_structured_answer_is_validated_and_provenanced(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, model_id="org/science-7b") as tgi:
        settings = make_settings(tmp_path, tgi.url)
        with get_llm(settings) as client:
            res = client.structured("echo_test", {"text": "hello"}, Echo, max_new_tokens=64)
        assert res.ok and res.value == Echo(echo="hello", length=5) and not res.cached
        assert (res.model, res.prompt_version, res.attempts) == ("org/science-7b", "echo_test@1", 1)
        assert len(res.cache_key) == 64 and res.rejection_reason is None
        sent = tgi.requests[0]
        assert sent["route"] == "/generate"
        assert sent["grammar"] == {"type": "json", "value": Echo.model_json_schema()}
        assert sent["parameters"]["max_new_tokens"] == 64


def test_rerun_makes_zero_new_calls(tmp_path: Path) -> None:
    texts = [f"text {i}" for i in range(25)]
    with FakeTGI(echo_responder, latency=0.01, max_concurrency=4) as tgi:
        settings = make_settings(tmp_path, tgi.url)
        first = ask(settings, texts + texts[:5])  # duplicates inside one batch are asked once
        assert all(r.ok for r in first) and tgi.calls == 25
        again = ask(settings, texts)  # a new client, as a retried task would have
        assert tgi.calls == 25
        assert all(r.cached and r.ok for r in again)
        assert [r.value for r in again] == [r.value for r in first[:25]]
        assert [r.cache_key for r in again] == [r.cache_key for r in first[:25]]


def test_garbage_is_reasked_then_rejected_with_raw_text_and_the_rejection_is_cached(tmp_path: Path) -> None:
    with FakeTGI(lambda req: "Sure, the answer is {not json", latency=0.0) as tgi:
        settings = make_settings(tmp_path, tgi.url, llm_max_reasks=2)
        (res,) = ask(settings, ["x"])
        assert not res.ok and res.value is None
        assert res.rejection_reason == "llm_invalid_json"
        assert res.raw == "Sure, the answer is {not json" and res.attempts == 3
        assert tgi.calls == 3
        assert "not valid" in tgi.requests[1]["prompt"]  # the re-ask says what was wrong
        with session_scope(settings) as s:
            row = s.get(LLMCacheEntry, res.cache_key)
            assert row is not None and row.status == "rejected" and row.response == res.raw
            rej = s.scalars(select(Rejection).where(Rejection.subject_key == res.cache_key)).one()
            assert rej.stage == "llm" and rej.reason == "llm_invalid_json" and res.raw in (rej.detail or "")
        (again,) = ask(settings, ["x"])
        assert tgi.calls == 3 and again.cached and not again.ok
        assert again.rejection_reason == "llm_invalid_json" and again.raw == res.raw


def test_one_bad_answer_then_a_good_one_is_accepted(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, faults=["garbage"]) as tgi:
        (res,) = ask(make_settings(tmp_path, tgi.url), ["abc"])
        assert res.ok and res.value == Echo(echo="abc", length=3) and res.attempts == 2
        assert tgi.calls == 2 and tgi.injected["garbage"] == 1


def test_schema_mismatch_is_rejected_with_the_field_named(tmp_path: Path) -> None:
    with FakeTGI(lambda req: '{"echo": "a", "length": "many"}') as tgi:
        (res,) = ask(make_settings(tmp_path, tgi.url, llm_max_reasks=0), ["a"])
        assert res.rejection_reason == "llm_schema_mismatch" and "length" in (res.rejection_detail or "")
        assert tgi.calls == 1


def test_429_503_and_dropped_connections_are_retried_and_the_run_completes(tmp_path: Path) -> None:
    faults = ["429", "503", "drop", "503", "drop", "429", "drop"]
    with FakeTGI(echo_responder, faults=faults, max_concurrency=2) as tgi:
        settings = make_settings(tmp_path, tgi.url)
        results = ask(settings, [f"t{i}" for i in range(10)])
        assert all(r.ok for r in results)
        assert tgi.injected == {"429": 2, "503": 2, "drop": 3}
        assert tgi.served == 10 and tgi.calls == 17


def test_random_faults_under_load_complete(tmp_path: Path) -> None:
    rates = {"503": 0.15, "drop": 0.1, "429": 0.1}
    with FakeTGI(echo_responder, fault_rates=rates, latency=0.005, max_concurrency=4, seed=7) as tgi:
        results = ask(make_settings(tmp_path, tgi.url), [f"t{i}" for i in range(60)])
        assert all(r.ok for r in results) and tgi.served == 60
        assert sum(tgi.injected.values()) > 0


def test_concurrency_never_exceeds_the_servers_cap(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, latency=0.03, max_concurrency=3) as tgi:
        settings = make_settings(tmp_path, tgi.url, llm_max_concurrency=64)
        results = ask(settings, [f"t{i}" for i in range(40)])
        assert all(r.ok for r in results)
        assert tgi.max_attempted <= 3 and tgi.overloaded == 0
        assert tgi.max_seen == 3  # and it does use the whole of it


def test_settings_cap_bounds_concurrency_below_the_servers(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, latency=0.03, max_concurrency=16) as tgi:
        ask(make_settings(tmp_path, tgi.url, llm_max_concurrency=2), [f"t{i}" for i in range(12)])
        assert tgi.max_attempted <= 2


def test_a_server_that_overstates_its_capacity_is_backed_off_from(tmp_path: Path) -> None:
    # /info says 16, but past 2 requests the server answers 429: the client halves its limit
    with FakeTGI(echo_responder, latency=0.02, max_concurrency=2, reported_max_concurrency=16) as tgi:
        results = ask(make_settings(tmp_path, tgi.url), [f"t{i}" for i in range(40)])
        assert all(r.ok for r in results) and tgi.served == 40
        assert tgi.overloaded > 0


def test_a_hung_request_times_out_and_is_retried(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, faults=["hang"], hang_s=3.0) as tgi:
        settings = make_settings(tmp_path, tgi.url, llm_request_timeout_s=0.5)
        (res,) = ask(settings, ["slow"])
        assert res.ok and tgi.calls == 2


def test_the_total_deadline_raises_and_caches_nothing(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, fault_rates={"503": 1.0}) as tgi:
        settings = make_settings(tmp_path, tgi.url, llm_deadline_s=0.5, llm_max_retries=100)
        with pytest.raises(LLMUnavailable, match="HTTP 503"):
            ask(settings, ["never"])
        assert tgi.calls >= 2
        tgi.fault_rates.clear()
        (res,) = ask(settings, ["never"])
        assert res.ok and not res.cached


def test_retry_budget_is_bounded(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, fault_rates={"drop": 1.0}) as tgi:
        settings = make_settings(tmp_path, tgi.url, llm_max_retries=3)
        with pytest.raises(LLMUnavailable, match="after 4 attempt"):
            ask(settings, ["x"])
        assert tgi.calls == 4


def test_unreachable_endpoint_names_the_setting(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, f"http://127.0.0.1:{free_port()}", llm_max_retries=2, llm_model="m")
    with pytest.raises(LLMUnavailable, match="SCICODEPILE_LLM_ENDPOINTS"):
        ask(settings, ["x"])


def test_several_endpoints_share_the_work_and_a_dead_one_is_skipped(tmp_path: Path) -> None:
    dead = f"http://127.0.0.1:{free_port()}"
    with (
        FakeTGI(echo_responder, latency=0.02, max_concurrency=2) as a,
        FakeTGI(echo_responder, latency=0.02, max_concurrency=2) as b,
    ):
        results = ask(make_settings(tmp_path, a.url, dead, b.url), [f"t{i}" for i in range(30)])
        assert all(r.ok for r in results)
        assert a.served + b.served == 30 and a.served > 0 and b.served > 0
        assert a.max_attempted <= 2 and b.max_attempted <= 2


def test_openai_compatible_route(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, model_id="vllm/model") as tgi:
        settings = make_settings(tmp_path, tgi.url, llm_api="openai")
        (res,) = ask(settings, ["chat"])
        assert res.ok and res.model == "vllm/model" and res.value == Echo(echo="chat", length=4)
        sent = tgi.requests[0]
        assert sent["route"] == "/v1/chat/completions" and sent["parameters"]["model"] == "vllm/model"
        assert sent["grammar"]["value"] == Echo.model_json_schema()


def test_judge_role_uses_its_own_endpoint_and_model(tmp_path: Path) -> None:
    with (
        FakeTGI(echo_responder, model_id="main/model") as main,
        FakeTGI(echo_responder, model_id="judge/model") as judge,
    ):
        settings = make_settings(tmp_path, main.url, llm_judge_endpoints=judge.url)
        (res,) = ask(settings, ["j"], role="judge")
        assert res.ok and res.model == "judge/model" and judge.calls == 1 and main.calls == 0


def test_a_request_the_server_refuses_is_rejected_not_retried(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, max_input_chars=1000) as tgi:
        settings = make_settings(tmp_path, tgi.url)
        short, long = ask(settings, ["ok", "y" * 2000])
        assert short.ok
        assert not long.ok and long.rejection_reason == "llm_request_rejected"
        assert "less than 1000" in (long.rejection_detail or "")
        with session_scope(settings) as s:
            reasons = s.scalars(select(Rejection.reason).where(Rejection.stage == "llm")).all()
        assert reasons == ["llm_request_rejected"]


def test_postgres_cache_with_large_answers_in_the_object_store(tmp_path: Path, pg_settings: Settings) -> None:
    big = "z" * 5000
    with FakeTGI(echo_responder) as tgi:
        settings = pg_settings.model_copy(
            update={"llm_endpoints": tgi.url, "llm_cache_inline_bytes": 1000, "llm_backoff_base_s": 0.01}
        )
        first = ask(settings, [big, "small"])
        assert all(r.ok for r in first) and tgi.calls == 2
        with session_scope(settings) as s:
            large = s.get(LLMCacheEntry, first[0].cache_key)
            small = s.get(LLMCacheEntry, first[1].cache_key)
        assert large is not None and large.response is None and large.response_key
        assert open_store(settings).exists(large.response_key)
        assert small is not None and small.response_key is None and small.response
        again = ask(settings, [big, "small"])
        assert tgi.calls == 2 and all(r.cached for r in again)
        assert again[0].value == Echo(echo=big, length=5000) and again[0].raw == first[0].raw


def test_answers_that_arrived_are_cached_before_a_failure_is_raised(tmp_path: Path) -> None:
    with FakeTGI(echo_responder, faults=["ok", "ok", "503"], max_concurrency=1) as tgi:
        settings = make_settings(tmp_path, tgi.url, llm_max_retries=0)
        with pytest.raises(LLMUnavailable):
            ask(settings, ["a", "b", "c", "d", "e"])
        served = tgi.served
        assert served >= 2 and tgi.calls == served + 1  # nothing new starts after the failure
        results = ask(settings, ["a", "b", "c", "d", "e"])
        assert all(r.ok for r in results) and sum(r.cached for r in results) == served
        assert tgi.served == 5


def test_with_the_cache_off_a_rerun_pays_again_but_rejections_are_still_recorded(tmp_path: Path) -> None:
    with FakeTGI(lambda req: "nonsense") as tgi:
        settings = make_settings(tmp_path, tgi.url, llm_cache=False, llm_max_reasks=0)
        ask(settings, ["a"])
        (again,) = ask(settings, ["a"])
        assert tgi.calls == 2 and not again.cached and again.rejection_reason == "llm_invalid_json"
        with session_scope(settings) as s:
            assert s.scalars(select(LLMCacheEntry)).all() == []
            assert [r.reason for r in s.scalars(select(Rejection))] == ["llm_invalid_json"]
