"""Expand seed keywords into validated GitHub search queries.

With an LLM endpoint, the ``expand_queries`` prompt asks for synonyms, abbreviations and subtopics per
seed (answers are cached by the LLM layer, so a rerun makes no LLM call).  Without one, the curated
synonym table gives a deterministic expansion recorded as method ``synonym-table``.  Every query is
validated (plain words, GitHub search syntax, length, duplicates); rejected ones are reported with
their reason.  Seeds always come first, and the list is capped at ``crawl_max_queries``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, Field

from scicodepile.crawl.vocabulary import Vocabulary, load_synonyms, load_vocabulary
from scicodepile.settings import Settings

log = logging.getLogger("scicodepile.crawl")

MAX_QUERY_CHARS = 60
MAX_QUERY_WORDS = 5
_ALLOWED = re.compile(r"^[a-z0-9][a-z0-9 +./#-]*$")
_OPERATORS = {"AND", "OR", "NOT"}

RejectFn = Callable[[str, str, str], None]


@dataclass(frozen=True)
class QuerySpec:
    """One search query with where it came from (seed, domain, method, model, prompt version)."""

    text: str
    seed: str
    domain: str
    method: str
    model: str | None = None
    prompt_version: str | None = None


class ExpandedQuery(BaseModel):
    seed: str
    query: str = Field(max_length=200)
    kind: Literal["synonym", "abbreviation", "subtopic"] = "synonym"


class QueryExpansion(BaseModel):
    """The JSON answer of the ``expand_queries`` prompt."""

    queries: list[ExpandedQuery] = Field(default_factory=list, max_length=200)


def normalize_query(text: str) -> str:
    return " ".join(text.strip().split())


def validate_query(text: str) -> str | None:
    """The reason ``text`` is not a usable search query, or None when it is fine."""
    raw = normalize_query(text)
    if not raw:
        return "empty"
    if any(word in _OPERATORS for word in raw.split()):
        return "search_operator"
    if ":" in raw:
        return "qualifier_not_allowed"
    query = raw.lower()
    if len(query) > MAX_QUERY_CHARS:
        return "too_long"
    if len(query.split()) > MAX_QUERY_WORDS:
        return "too_many_words"
    if not _ALLOWED.match(query):
        return "invalid_characters"
    return None


def search_terms(query: str) -> str:
    """The query as GitHub search text: several words are one quoted phrase."""
    return f'"{query}"' if " " in query else query


def _ordered(
    vocab: Vocabulary,
    variants: dict[str, list[QuerySpec]],
    max_queries: int,
    method: str,
    on_reject: RejectFn | None,
) -> list[QuerySpec]:
    """Round-robin over domains: each seed, then its variants; de-duplicated; capped."""
    per_domain = [[(domain, seed) for seed in words] for domain, words in vocab.domains.items()]
    out: list[QuerySpec] = []
    seen: set[str] = set()
    longest = max((len(d) for d in per_domain), default=0)
    for i in range(longest):
        for words in per_domain:
            if i >= len(words):
                continue
            domain, seed = words[i]
            for spec in [QuerySpec(seed, seed, domain, "seed"), *variants.get(seed, [])]:
                reason = validate_query(spec.text)
                text = normalize_query(spec.text).lower()
                if reason is None and text in seen:
                    reason = "duplicate"
                if reason is not None:
                    if on_reject and reason != "duplicate":
                        on_reject(spec.text[:200], f"query_{reason}", f"seed {seed!r} ({spec.method})")
                    continue
                seen.add(text)
                out.append(
                    QuerySpec(text, spec.seed, spec.domain, spec.method, spec.model, spec.prompt_version)
                )
    if len(out) > max_queries:
        log.info(
            "%d queries after expansion; keeping the first %d (crawl_max_queries)", len(out), max_queries
        )
    return out[:max_queries]


def expand_with_synonyms(
    settings: Settings, vocab: Vocabulary, on_reject: RejectFn | None = None
) -> list[QuerySpec]:
    """Deterministic expansion from the curated synonym table (no LLM)."""
    _version, table = load_synonyms(settings.crawl_synonyms)
    variants = {
        seed: [QuerySpec(v, seed, domain, "synonym-table") for v in table.get(seed, [])]
        for domain, seed in vocab.seeds
    }
    return _ordered(vocab, variants, settings.crawl_max_queries, "synonym-table", on_reject)


def expand_with_llm(
    settings: Settings,
    vocab: Vocabulary,
    on_reject: RejectFn | None = None,
    chunk: int = 10,
    per_seed: int = 2,
) -> list[QuerySpec]:
    """LLM expansion, one prompt per chunk of seeds; failed chunks fall back to the synonym table."""
    from scicodepile.llm import get_llm

    _version, table = load_synonyms(settings.crawl_synonyms)
    client = get_llm(settings, role="default")
    try:
        jobs: list[tuple[str, list[str]]] = []
        for domain, words in vocab.domains.items():
            for start in range(0, len(words), chunk):
                jobs.append((domain, words[start : start + chunk]))
        results = client.structured_many(
            "expand_queries",
            [{"domain": d, "seeds": seeds, "per_seed": per_seed} for d, seeds in jobs],
            QueryExpansion,
            max_new_tokens=1024,
        )
    finally:
        client.close()
    variants: dict[str, list[QuerySpec]] = {}
    for (domain, seeds), res in zip(jobs, results, strict=True):
        if not res.ok or res.value is None:
            if on_reject:
                on_reject(
                    f"expand:{domain}:{seeds[0]}", "llm_expansion_rejected", res.rejection_reason or "?"
                )
            for seed in seeds:
                variants[seed] = [QuerySpec(v, seed, domain, "synonym-table") for v in table.get(seed, [])]
            continue
        wanted = set(seeds)
        for item in res.value.queries:  # type: ignore[attr-defined]
            seed = normalize_query(item.seed).lower()
            if seed not in wanted:
                if on_reject:
                    on_reject(item.query[:200], "query_unknown_seed", f"seed {item.seed!r} not asked for")
                continue
            if len(variants.setdefault(seed, [])) < per_seed:
                variants[seed].append(
                    QuerySpec(item.query, seed, domain, "llm", res.model, res.prompt_version)
                )
    return _ordered(vocab, variants, settings.crawl_max_queries, "llm", on_reject)


def expand_queries(settings: Settings, on_reject: RejectFn | None = None) -> tuple[list[QuerySpec], str]:
    """The crawl's queries and the vocabulary version; LLM when configured, else the synonym table."""
    vocab = load_vocabulary(settings.crawl_vocabulary)
    try:
        from scicodepile.llm import llm_configured
    except ImportError:  # the LLM layer is not in this build
        return expand_with_synonyms(settings, vocab, on_reject), vocab.version
    if llm_configured(settings):
        return expand_with_llm(settings, vocab, on_reject), vocab.version
    return expand_with_synonyms(settings, vocab, on_reject), vocab.version
