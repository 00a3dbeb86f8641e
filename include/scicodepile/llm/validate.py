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


def extract_json_object(text: str) -> dict[str, Any]:
    """The JSON object in ``text``: the whole text, a fenced block, or the first ``{...}`` in it."""
    stripped = text.strip()
    candidates = [stripped]
    candidates += [m.group(1).strip() for m in _FENCE_RE.finditer(text)]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text):
        try:
            value, _ = decoder.raw_decode(text, match.start())
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    if stripped.startswith(("{", "[")) or "{" in stripped:
        try:
            json.loads(stripped)
        except ValueError as exc:
            raise ValueError(f"not valid JSON: {exc}") from None
        raise ValueError("a JSON value, but not an object")
    raise ValueError("no JSON object in the answer")


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
