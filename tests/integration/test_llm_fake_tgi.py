"""The TGI-speaking test server answers like TGI over real HTTP: routes, 429 past its cap, 422, faults."""

from __future__ import annotations

import threading

import httpx
import pytest

from tests.fakes.tgi_server import FakeTGI, minimal_instance

pytestmark = pytest.mark.integration


def test_health_info_and_models() -> None:
    with FakeTGI(max_concurrency=7, model_id="org/m") as tgi, httpx.Client(base_url=tgi.url) as http:
        assert http.get("/health").status_code == 200
        info = http.get("/info").json()
        assert info["model_id"] == "org/m" and info["max_concurrent_requests"] == 7
        assert info["router"] == "text-generation-router"
        assert http.get("/v1/models").json()["data"][0]["id"] == "org/m"
        assert http.get("/nope").status_code == 404
        assert tgi.calls == 0


def test_generate_honours_the_grammar_loosely() -> None:
    schema = {
        "type": "object",
        "properties": {
            "verdict": {"enum": ["yes", "no"]},
            "n": {"type": "integer"},
            "tags": {"type": "array"},
        },
        "required": ["verdict", "n", "tags"],
    }
    with FakeTGI() as tgi, httpx.Client(base_url=tgi.url) as http:
        body = {
            "inputs": "Q",
            "parameters": {"max_new_tokens": 5, "grammar": {"type": "json", "value": schema}},
        }
        r = http.post("/generate", json=body)
        assert r.status_code == 200 and r.json()["generated_text"] == '{"verdict": "yes", "n": 0, "tags": []}'
        bad = {"inputs": "Q", "parameters": {"grammar": {"type": "yaml", "value": {}}}}
        r = http.post("/generate", json=bad)
        assert r.status_code == 422 and r.json()["error_type"] == "validation"
        assert http.post("/generate", json={"parameters": {}}).status_code == 422
        assert (
            http.post("/generate", json={"inputs": "Q", "parameters": {"temperature": 0}}).status_code == 422
        )
        assert tgi.calls == 1


def test_chat_completions_shape() -> None:
    with FakeTGI(lambda req: "pong " + req["prompt"]) as tgi, httpx.Client(base_url=tgi.url) as http:
        r = http.post(
            "/v1/chat/completions", json={"model": "x", "messages": [{"role": "user", "content": "ping"}]}
        )
        data = r.json()
        assert data["object"] == "chat.completion" and data["choices"][0]["message"]["content"] == "pong ping"
        assert data["usage"]["completion_tokens"] >= 1


def test_past_its_cap_it_answers_429_model_is_overloaded() -> None:
    with FakeTGI(latency=0.5, max_concurrency=2) as tgi:
        statuses: list[int] = []
        bodies: list[dict] = []

        def call() -> None:
            with httpx.Client(base_url=tgi.url, timeout=10) as http:
                r = http.post("/generate", json={"inputs": "x"})
                statuses.append(r.status_code)
                bodies.append(r.json())

        threads = [threading.Thread(target=call) for _ in range(5)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(statuses) == [200, 200, 429, 429, 429]
        assert {"error": "Model is overloaded", "error_type": "overloaded"} in bodies
        assert tgi.max_seen == 2 and tgi.max_attempted >= 3 and tgi.overloaded == 3 and tgi.calls == 5


def test_scripted_faults() -> None:
    with FakeTGI(faults=["503", "drop", "garbage", "ok"]) as tgi, httpx.Client(base_url=tgi.url) as http:
        assert http.post("/generate", json={"inputs": "x"}).status_code == 503
        with pytest.raises(httpx.RemoteProtocolError):
            http.post("/generate", json={"inputs": "x"})
        assert http.post("/generate", json={"inputs": "x"}).json()["generated_text"].startswith("Sure!")
        assert http.post("/generate", json={"inputs": "a\nb"}).json()["generated_text"] == "b"
        assert tgi.injected == {"503": 1, "drop": 1, "garbage": 1} and tgi.served == 2
    with pytest.raises(ValueError, match="unknown fault"):
        FakeTGI(faults=["explode"])


def test_minimal_instance_follows_refs_and_nullable() -> None:
    schema = {
        "$defs": {"Inner": {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]}},
        "type": "object",
        "properties": {
            "inner": {"$ref": "#/$defs/Inner"},
            "maybe": {"anyOf": [{"type": "null"}, {"type": "boolean"}]},
        },
        "required": ["inner", "maybe"],
    }
    assert minimal_instance(schema) == {"inner": {"x": 0.0}, "maybe": False}


def test_the_server_runs_in_its_own_process_too() -> None:
    from tests.fakes.tgi_server import FakeTGIProcess

    with FakeTGIProcess(latency=0.0, max_concurrency=3, answer='{"a": 1}') as tgi:
        r = httpx.post(tgi.url + "/generate", json={"inputs": "x"})
        assert r.json()["generated_text"] == '{"a": 1}'
        assert httpx.get(tgi.url + "/info").json()["max_concurrent_requests"] == 3
        assert tgi.stats()["calls"] == 1
    assert tgi.proc is None
