"""Answer parsing and validation against a pydantic schema."""

from __future__ import annotations

from typing import Literal

import pytest
from pydantic import BaseModel

from scicodepile.llm.validate import check_answer, extract_json_object


class Verdict(BaseModel):
    verdict: Literal["yes", "no"]
    domain: str = ""


@pytest.mark.parametrize(
    "text",
    [
        '{"verdict": "yes", "domain": "physics"}',
        '  ```json\n{"verdict": "yes", "domain": "physics"}\n```  ',
        'Here you go: {"verdict": "yes", "domain": "physics"} Hope this helps.',
    ],
)
def test_object_is_found_in_common_wrappings(text: str) -> None:
    v = check_answer(text, Verdict)
    assert v.value == Verdict(verdict="yes", domain="physics") and v.reason is None


def test_truncated_json_is_invalid_json() -> None:
    v = check_answer('{"verdict": "yes", "domain": "phys', Verdict)
    assert v.value is None and v.reason == "invalid_json" and "not valid JSON" in (v.detail or "")


def test_prose_is_invalid_json() -> None:
    v = check_answer("I think the answer is yes.", Verdict)
    assert v.reason == "invalid_json" and v.detail == "no JSON object in the answer"


def test_array_is_not_an_object() -> None:
    with pytest.raises(ValueError, match="not an object"):
        extract_json_object('["yes"]')


def test_wrong_values_are_a_schema_mismatch_naming_the_field() -> None:
    v = check_answer('{"verdict": "maybe"}', Verdict)
    assert v.value is None and v.reason == "schema_mismatch"
    assert v.detail and v.detail.startswith("verdict:")
    assert v.parsed == {"verdict": "maybe"}


@pytest.mark.parametrize(
    "text, detail",
    [
        ('[{"verdict": "yes"}]', "a JSON array, not an object"),
        ('```json\n[{"verdict": "yes"}]\n```', "a JSON array, not an object"),
        ('"yes"', "a JSON string, not an object"),
        ("null", "a JSON null, not an object"),
        ("", "empty answer"),
        ("   \n ", "empty answer"),
    ],
)
def test_json_that_is_not_an_object_is_refused_not_searched(text: str, detail: str) -> None:
    v = check_answer(text, Verdict)
    assert v.value is None and v.reason == "invalid_json" and v.detail == detail


def test_extra_keys_are_ignored_and_wrong_types_named() -> None:
    assert check_answer('{"verdict": "no", "confidence": 0.3}', Verdict).value == Verdict(verdict="no")
    v = check_answer('{"verdict": 1}', Verdict)
    assert v.reason == "schema_mismatch" and "verdict" in (v.detail or "")


@pytest.mark.parametrize(
    "text",
    [
        "[" * 200_000,
        '{"a":' * 200_000,
        "x" * 2_000_000,
        "{ " * 500_000 + '{"verdict": "yes"}',
        'prose {"a": ' + "[" * 100_000,
    ],
    ids=["deep-array", "deep-object", "huge-prose", "many-braces", "prose-then-deep"],
)
def test_pathological_answers_are_refused_quickly_without_crashing(text: str) -> None:
    v = check_answer(text, Verdict)
    assert v.value is None and v.reason == "invalid_json"
