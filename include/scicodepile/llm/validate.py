"""Turning generated text into a validated pydantic object, or a short, countable reason why not.

Even with a grammar the text can be wrong (truncated at ``max_new_tokens``, a server without grammar
support, a model wrapping JSON in a Markdown fence), so every answer is parsed and validated here.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

_FENCE_RE = re.compile(r"```(?:json|JSON)?\s*\n?(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class Verdict:
    """The outcome of checking one answer: a value, or a reason (``invalid_json`` ...) and detail."""

    value: BaseModel | None
    parsed: dict[str, Any] | None
    reason: str | None = None
    detail: str | None = None


MAX_ANSWER_CHARS = 1_000_000  # far above any schema'd answer; bounds the parsing work on garbage
MAX_SCAN = 64  # "{" positions tried when the object is embedded in prose


def _loads(candidate: str) -> Any:
    try:
        return json.loads(candidate)
    except RecursionError:  # "[[[[..." nested past the interpreter's limit
        raise ValueError("JSON nested too deeply") from None


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text``: the whole text, a fenced block, or the first ``{...}`` in prose.

    An answer that *is* valid JSON but not an object (an array, a string, ``null``) is refused, not
    searched for an object inside it: ``[{...}, {...}]`` is a different shape, not a wrapping.  Empty,
    oversized and deeply nested answers are refused with their own reason.
    """
    stripped = text.strip()
    if not stripped:
        raise ValueError("empty answer")
    if len(stripped) > MAX_ANSWER_CHARS:
        raise ValueError(f"answer of {len(stripped)} characters (limit {MAX_ANSWER_CHARS})")
    for candidate in [stripped] + [m.group(1).strip() for m in _FENCE_RE.finditer(text)]:
        try:
            value = _loads(candidate)
        except ValueError as exc:
            if "nested too deeply" in str(exc):
                raise
            continue
        if isinstance(value, dict):
            return value
        raise ValueError(f"a JSON {_kind(value)}, not an object")
    decoder = json.JSONDecoder()
    for tried, match in enumerate(re.finditer(r"\{", text)):
        if tried >= MAX_SCAN:
            break
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except RecursionError:
            raise ValueError("JSON nested too deeply") from None
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    if "{" in stripped or stripped.startswith("["):
        try:
            _loads(stripped)
        except ValueError as exc:
            raise ValueError(f"not valid JSON: {exc}") from None
    raise ValueError("no JSON object in the answer")


def _kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number"}.get(
        type(value), "null"
    )


def check_answer(text: str, schema: type[BaseModel]) -> Verdict:
    """Parse and validate one answer against ``schema``."""
    try:
        parsed = extract_json_object(text)
    except ValueError as exc:
        return Verdict(None, None, "invalid_json", str(exc))
    try:
        return Verdict(schema.model_validate(parsed), parsed)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '<root>'}: {err['msg']}" for err in exc.errors()[:5]
        )
        return Verdict(None, parsed, "schema_mismatch", problems)
