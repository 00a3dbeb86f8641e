"""Request bodies and answer parsing for the two wire formats, and the backoff schedule."""

from __future__ import annotations

import pytest

from scicodepile.llm.backends import OpenAIBackend, TGIBackend, Turn
from scicodepile.llm.cache import cache_key
from scicodepile.llm.transport import backoff_delay

SCHEMA = {"title": "Verdict", "type": "object", "properties": {"verdict": {"type": "string"}}}


def test_tgi_body_sends_the_schema_as_grammar() -> None:
    body = TGIBackend().body(
        model="m", prompt="P", history=[], schema=SCHEMA, max_new_tokens=64, temperature=0.0, seed=None
    )
    assert body["inputs"] == "P"
    params = body["parameters"]
    assert params["grammar"] == {"type": "json", "value": SCHEMA}
    assert params["max_new_tokens"] == 64 and params["do_sample"] is False
    assert "temperature" not in params  # TGI refuses temperature 0
    hot = TGIBackend().body(
        model="m", prompt="P", history=[], schema=None, max_new_tokens=8, temperature=0.7, seed=3
    )
    assert hot["parameters"]["temperature"] == 0.7 and hot["parameters"]["seed"] == 3
    assert "grammar" not in hot["parameters"]


def test_tgi_reask_appends_the_bad_answer_and_the_problem() -> None:
    body = TGIBackend().body(
        model="m",
        prompt="P",
        history=[Turn("oops", "invalid_json: no JSON object")],
        schema=None,
        max_new_tokens=8,
        temperature=0.0,
        seed=2,
    )
    assert body["inputs"].startswith("P\noops\n") and "not valid: invalid_json" in body["inputs"]


def test_openai_body_uses_messages_and_response_format() -> None:
    body = OpenAIBackend().body(
        model="org/model",
        prompt="P",
        history=[Turn("oops", "bad")],
        schema=SCHEMA,
        max_new_tokens=32,
        temperature=0.0,
        seed=None,
    )
    assert body["model"] == "org/model" and body["max_tokens"] == 32
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["response_format"]["type"] == "json_schema"
    assert body["response_format"]["json_schema"] == {"name": "Verdict", "schema": SCHEMA}


def test_answers_are_parsed_and_malformed_ones_refused() -> None:
    c = TGIBackend().parse(
        {"generated_text": "hi", "details": {"generated_tokens": 1, "finish_reason": "length"}}
    )
    assert (c.text, c.completion_tokens, c.finish_reason) == ("hi", 1, "length")
    assert TGIBackend().parse([{"generated_text": "x"}]).text == "x"
    o = OpenAIBackend().parse(
        {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 3}}
    )
    assert (o.text, o.prompt_tokens) == ("hi", 3)
    with pytest.raises(ValueError):
        TGIBackend().parse({"error": "x"})
    with pytest.raises(ValueError):
        OpenAIBackend().parse({"choices": []})


def test_backoff_grows_is_capped_and_jittered() -> None:
    for attempt in range(12):
        ceiling = min(8.0, 0.5 * 2**attempt)
        for _ in range(20):
            d = backoff_delay(attempt, 0.5, 8.0)
            assert ceiling / 2 <= d <= ceiling
    assert len({backoff_delay(5, 0.5, 8.0) for _ in range(20)}) > 1
    assert backoff_delay(0, 0.5, 8.0, retry_after=3.0) >= 3.0
    assert backoff_delay(0, 0.5, 8.0, retry_after=999.0) <= 8.0


def test_cache_key_changes_with_every_component() -> None:
    base = cache_key("m", "p@1", "prompt", {"max_new_tokens": 5})
    assert base == cache_key("m", "p@1", "prompt", {"max_new_tokens": 5})
    assert (
        len(
            {
                base,
                cache_key("m2", "p@1", "prompt", {"max_new_tokens": 5}),
                cache_key("m", "p@2", "prompt", {"max_new_tokens": 5}),
                cache_key("m", "p@1", "prompt!", {"max_new_tokens": 5}),
                cache_key("m", "p@1", "prompt", {"max_new_tokens": 6}),
            }
        )
        == 5
    )
