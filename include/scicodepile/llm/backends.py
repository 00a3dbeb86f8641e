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
        if not isinstance(data, dict) or not isinstance(data.get("generated_text"), str):
            raise ValueError("TGI answer has no generated_text")
        details = data.get("details") or {}
        return Completion(
            text=data["generated_text"],
            completion_tokens=details.get("generated_tokens"),
            prompt_tokens=len(details["prefill"]) if details.get("prefill") else None,
            finish_reason=details.get("finish_reason"),
        )


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
        try:
            choice = data["choices"][0]
            text = choice["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise ValueError("chat completion has no choices[0].message.content") from None
        if not isinstance(text, str):
            raise ValueError("chat completion content is not a string")
        usage = data.get("usage") or {}
        return Completion(
            text=text,
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            finish_reason=choice.get("finish_reason"),
        )


BACKENDS: dict[str, type[Backend]] = {"tgi": TGIBackend, "openai": OpenAIBackend}
