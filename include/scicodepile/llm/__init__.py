"""The LLM layer: TGI / OpenAI-compatible clients with backpressure, structured output and a cache.

Contract used by the stages (keep it stable)::

    from scicodepile.llm import LLMNotConfigured, LLMResult, get_llm, llm_configured
    if llm_configured(settings):
        with get_llm(settings) as client:
            res = client.structured(prompt="readme_check", variables={...}, schema=Model, max_new_tokens=512)

Prompt templates are files in ``scicodepile/llm/prompts/<name>.j2`` (:mod:`scicodepile.llm.templates`).
"""

from __future__ import annotations

from scicodepile.llm.client import LLMClient, LLMNotConfigured, LLMResult, get_llm, llm_configured
from scicodepile.llm.templates import PromptError, PromptTemplate, load_prompt, untrusted
from scicodepile.llm.transport import LLMRequestRejected, LLMUnavailable

__all__ = [
    "LLMClient",
    "LLMNotConfigured",
    "LLMRequestRejected",
    "LLMResult",
    "LLMUnavailable",
    "PromptError",
    "PromptTemplate",
    "get_llm",
    "llm_configured",
    "load_prompt",
    "untrusted",
]
