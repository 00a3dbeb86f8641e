"""Request bodies and answer parsing for the two wire formats, and the backoff schedule."""

from __future__ import annotations

import pytest

from scicodepile.llm.backends import ErrorBody, OpenAIBackend, TGIBackend, Turn
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
        OpenAIBackend().parse({"choices": "nope"})
    # a well-formed answer with nothing in it is this item's fault: an empty completion that says why
    empty = OpenAIBackend().parse({"choices": []})
    assert empty.text == "" and empty.extra["problem"] == "chat completion with no choices"
    refused = OpenAIBackend().parse(
        {"choices": [{"message": {"content": None}, "finish_reason": "content_filter"}]}
    )
    assert refused.text == "" and "content_filter" in refused.extra["problem"]


@pytest.mark.parametrize(
    "body, error_type",
    [
        ({"error": "Input validation error: `inputs` too long", "error_type": "validation"}, "validation"),
        ({"error": "Model is overloaded", "error_type": "overloaded"}, "overloaded"),
        ({"error": {"message": "bad", "type": "invalid_request_error"}}, "invalid_request_error"),
    ],
)
def test_an_error_body_in_a_200_is_an_error_body(body: dict, error_type: str) -> None:
    for backend in (TGIBackend(), OpenAIBackend()):
        with pytest.raises(ErrorBody) as err:
            backend.parse(body)
        assert err.value.error_type == error_type


def test_event_streams_are_read_when_a_server_streams_unasked() -> None:
    tgi = (
        b'data: {"token": {"id": 1, "text": "{\\"a\\"", "special": false}, "generated_text": null}\n\n'
        b'data: {"token": {"id": 2, "text": ": 1}", "special": false}, "generated_text": "{\\"a\\": 1}",'
        b' "details": {"finish_reason": "eos_token", "generated_tokens": 2}}\n\n'
    )
    c = TGIBackend().read(tgi, "text/event-stream")
    assert (c.text, c.finish_reason, c.completion_tokens) == ('{"a": 1}', "eos_token", 2)
    oa = (
        b'data: {"choices": [{"delta": {"content": "{\\"a\\""}, "finish_reason": null}]}\n\n'
        b'data: {"choices": [{"delta": {"content": ": 1}"}, "finish_reason": "length"}]}\n\n'
        b"data: [DONE]\n\n"
    )
    o = OpenAIBackend().read(oa, "text/event-stream")
    assert (o.text, o.finish_reason) == ('{"a": 1}', "length")
    with pytest.raises(ErrorBody):
        TGIBackend().read(b'data: {"error": "boom", "error_type": "generation"}\n\n', "text/event-stream")
    with pytest.raises(ValueError):
        TGIBackend().read(b"data: not json\n\n", "text/event-stream")


def test_bytes_that_are_not_utf8_become_replacement_characters() -> None:
    c = TGIBackend().read(b'{"generated_text": "caf\xe9 \xff"}', "application/json")
    assert c.text == "caf\ufffd \ufffd"


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
