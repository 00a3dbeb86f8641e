"""The two wire protocols: TGI's ``/generate`` (with ``grammar``) and OpenAI's ``/v1/chat/completions``.

A backend only builds request bodies and reads responses; retries, limits and caching live in
:mod:`scicodepile.llm.transport` and :mod:`scicodepile.llm.client`.  TGI's native route takes the
rendered prompt as-is (no chat template is applied, so templates for ``tgi`` are complete prompts) and
enforces a JSON schema through ``parameters.grammar = {"type": "json", "value": schema}``.  The
OpenAI-compatible route (TGI's Messages API, vLLM) sends the prompt as one user message; the server
applies the model's chat template, and the schema goes in ``response_format`` (OpenAI's
``json_schema`` form, which vLLM and recent TGI accept).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Turn:
    """One earlier exchange in a re-ask: what the model answered and what was wrong with it."""

    answer: str
    problem: str


@dataclass
class Completion:
    """A parsed server answer: the generated text and token counts when the server reports them."""

    text: str
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def reask_note(problem: str) -> str:
    """The correction appended after an invalid answer."""
    return (
        f"Your previous answer was not valid: {problem[:500]}\n"
        "Answer again with only one JSON object that matches the required schema, and nothing else."
    )


class ErrorBody(ValueError):
    """A 200 answer whose body is an error (``{"error": ..., "error_type": ...}``), as TGI sends one
    inside a stream or a proxy passes one on; ``error_type`` says whether retrying can help."""

    def __init__(self, message: str, error_type: str | None) -> None:
        self.error_type = error_type
        super().__init__(message)


def _error_in(data: Any, *, content_keys: tuple[str, ...]) -> None:
    """Raise :class:`ErrorBody` when ``data`` is an error object and carries none of ``content_keys``."""
    if isinstance(data, dict) and data.get("error") and not any(k in data for k in content_keys):
        err = data["error"]
        error_type = data.get("error_type")
        if isinstance(err, dict):  # OpenAI / vLLM: {"error": {"message": ..., "type": ...}}
            error_type = error_type or err.get("type") or err.get("code")
            err = err.get("message") or err
        raise ErrorBody(str(err)[:500], None if error_type is None else str(error_type))


def sse_events(text: str) -> list[Any]:
    """The JSON payloads of a server-sent-events body (``data: {...}`` lines; ``[DONE]`` ends it)."""
    events: list[Any] = []
    for line in text.splitlines():
        if not line.startswith("data:"):
            continue
        payload = line[5:].strip()
        if payload == "[DONE]":
            break
        if payload:
            try:
                events.append(json.loads(payload))
            except ValueError:
                raise ValueError(f"unreadable server-sent event {payload[:80]!r}") from None
    if not events:
        raise ValueError("an event stream without events")
    return events


class Backend:
    """Builds request bodies and parses answers for one API flavour."""

    name: str = "abstract"
    path: str = ""
    supports_grammar: bool = False
    info_path: str | None = None

    def body(
        self,
        *,
        model: str,
        prompt: str,
        history: list[Turn],
        schema: dict[str, Any] | None,
        max_new_tokens: int,
        temperature: float,
        seed: int | None,
    ) -> dict[str, Any]:
        raise NotImplementedError

    def parse(self, data: Any) -> Completion:
        raise NotImplementedError

    def parse_stream(self, events: list[Any]) -> Completion:
        raise NotImplementedError

    def read(self, content: bytes, content_type: str = "") -> Completion:
        """A 200 body as a completion: JSON, or an event stream from a server that streamed although
        ``stream`` was not asked for.  Bytes that are not UTF-8 become U+FFFD (the answer is then judged
        on its text, not lost to a decoding error); an error body raises :class:`ErrorBody`; anything
        unreadable raises ``ValueError``."""
        text = content.decode("utf-8", "replace")
        if "text/event-stream" in content_type or text.lstrip().startswith("data:"):
            return self.parse_stream(sse_events(text))
        return self.parse(json.loads(text))


class TGIBackend(Backend):
    """TGI's native ``POST /generate``."""

    name = "tgi"
    path = "/generate"
    supports_grammar = True
    info_path = "/info"

    def body(
        self,
        *,
        model: str,
        prompt: str,
        history: list[Turn],
        schema: dict[str, Any] | None,
        max_new_tokens: int,
        temperature: float,
        seed: int | None,
    ) -> dict[str, Any]:
        text = prompt
        for turn in history:
            text += f"\n{turn.answer[:2000]}\n\n{reask_note(turn.problem)}\n"
        params: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "details": True,
            "return_full_text": False,
            "do_sample": temperature > 0,
        }
        if temperature > 0:  # TGI rejects temperature == 0
            params["temperature"] = temperature
        if seed is not None:
            params["seed"] = seed
        if schema is not None:
            params["grammar"] = {"type": "json", "value": schema}
        return {"inputs": text, "parameters": params}

    def parse(self, data: Any) -> Completion:
        if isinstance(data, list) and data:  # some TGI versions answer a one-element list
            data = data[0]
        _error_in(data, content_keys=("generated_text",))
        if not isinstance(data, dict) or not isinstance(data.get("generated_text"), str):
            raise ValueError("TGI answer has no generated_text")
        details = data.get("details") if isinstance(data.get("details"), dict) else {}
        prefill = details.get("prefill")
        return Completion(
            text=data["generated_text"],
            completion_tokens=_int_or_none(details.get("generated_tokens")),
            prompt_tokens=len(prefill) if isinstance(prefill, list) and prefill else None,
            finish_reason=_str_or_none(details.get("finish_reason")),
        )

    def parse_stream(self, events: list[Any]) -> Completion:
        """TGI's ``/generate_stream`` events: the last one carries ``generated_text`` and ``details``."""
        tokens: list[str] = []
        for event in events:
            _error_in(event, content_keys=("token", "generated_text"))
            if not isinstance(event, dict):
                raise ValueError("TGI stream event is not an object")
            if isinstance(event.get("generated_text"), str):
                return self.parse(event)
            token = event.get("token")
            if isinstance(token, dict) and isinstance(token.get("text"), str) and not token.get("special"):
                tokens.append(token["text"])
        return Completion(text="".join(tokens), finish_reason=None, extra={"problem": "stream ended early"})


class OpenAIBackend(Backend):
    """OpenAI-compatible ``POST /v1/chat/completions`` (TGI Messages API, vLLM)."""

    name = "openai"
    path = "/v1/chat/completions"
    supports_grammar = True
    info_path = None

    def body(
        self,
        *,
        model: str,
        prompt: str,
        history: list[Turn],
        schema: dict[str, Any] | None,
        max_new_tokens: int,
        temperature: float,
        seed: int | None,
    ) -> dict[str, Any]:
        messages: list[dict[str, str]] = [{"role": "user", "content": prompt}]
        for turn in history:
            messages.append({"role": "assistant", "content": turn.answer[:2000]})
            messages.append({"role": "user", "content": reask_note(turn.problem)})
        body: dict[str, Any] = {
            "model": model or "tgi",
            "messages": messages,
            "max_tokens": max_new_tokens,
            "temperature": temperature,
            "stream": False,
        }
        if seed is not None:
            body["seed"] = seed
        if schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": str(schema.get("title") or "answer")[:64], "schema": schema},
            }
        return body

    def parse(self, data: Any) -> Completion:
        """A chat completion.  A well-formed answer without content (``choices: []``, a ``null``
        content after a refusal or a content filter) is an empty completion with ``extra["problem"]``:
        a fault of this item's answer, judged and recorded like any invalid answer, not a server fault."""
        _error_in(data, content_keys=("choices",))
        if not isinstance(data, dict) or not isinstance(data.get("choices"), list):
            raise ValueError("chat completion has no choices list")
        usage = data.get("usage") if isinstance(data.get("usage"), dict) else {}
        tokens = {
            "prompt_tokens": _int_or_none(usage.get("prompt_tokens")),
            "completion_tokens": _int_or_none(usage.get("completion_tokens")),
        }
        if not data["choices"]:
            return Completion(text="", extra={"problem": "chat completion with no choices"}, **tokens)
        choice = data["choices"][0]
        message = choice.get("message") if isinstance(choice, dict) else None
        text = message.get("content") if isinstance(message, dict) else None
        finish = _str_or_none(choice.get("finish_reason")) if isinstance(choice, dict) else None
        if not isinstance(text, str):
            problem = f"chat completion without text content (finish_reason {finish!r})"
            return Completion(text="", finish_reason=finish, extra={"problem": problem}, **tokens)
        return Completion(text=text, finish_reason=finish, **tokens)

    def parse_stream(self, events: list[Any]) -> Completion:
        """OpenAI ``chat.completion.chunk`` events: the deltas' contents, joined."""
        parts: list[str] = []
        finish: str | None = None
        for event in events:
            _error_in(event, content_keys=("choices",))
            choices = event.get("choices") if isinstance(event, dict) else None
            if not isinstance(choices, list):
                raise ValueError("chat completion chunk has no choices list")
            for choice in choices[:1]:
                delta = choice.get("delta") if isinstance(choice, dict) else None
                if isinstance(delta, dict) and isinstance(delta.get("content"), str):
                    parts.append(delta["content"])
                if isinstance(choice, dict) and choice.get("finish_reason"):
                    finish = _str_or_none(choice["finish_reason"])
        return Completion(text="".join(parts), finish_reason=finish)


def _int_or_none(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _str_or_none(value: Any) -> str | None:
    return value[:64] if isinstance(value, str) else None


BACKENDS: dict[str, type[Backend]] = {"tgi": TGIBackend, "openai": OpenAIBackend}
