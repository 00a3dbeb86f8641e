from __future__ import annotations

import json
from pathlib import Path

import pytest

from scicodepile.crawl.queries import expand_queries, expand_with_synonyms, search_terms, validate_query
from scicodepile.crawl.vocabulary import load_synonyms, load_vocabulary
from scicodepile.errors import ConfigError
from scicodepile.settings import DATA_DIR, load_settings


def test_seed_vocabulary_has_about_200_keywords_over_five_domains() -> None:
    vocab = load_vocabulary(DATA_DIR / "seed_vocabulary.json")
    assert set(vocab.domains) == {
        "chemistry",
        "life-sciences",
        "pharmaceutics",
        "numerical-methods",
        "ai-modelling",
    }
    seeds = [k for _, k in vocab.seeds]
    assert 180 <= len(seeds) <= 220
    assert len(set(seeds)) == len(seeds)
    assert all(validate_query(k) is None for k in seeds), [k for k in seeds if validate_query(k)]
    version, table = load_synonyms(DATA_DIR / "synonyms.json")
    assert version and set(table) <= set(seeds)


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("drug design stars:>5", "qualifier_not_allowed"),
        ("chemistry OR biology", "search_operator"),
        ('"quoted phrase"', "invalid_characters"),
        ("(group)", "invalid_characters"),
        ("wild*card", "invalid_characters"),
        ("one two three four five six", "too_many_words"),
        ("x" * 61, "too_long"),
    ],
)
def test_invalid_queries_are_named(text: str, reason: str) -> None:
    assert validate_query(text) == reason


def test_valid_queries_and_phrase_quoting() -> None:
    assert validate_query("Molecular   Dynamics") is None
    assert validate_query("pk/pd modelling") is None
    assert search_terms("molecular dynamics") == '"molecular dynamics"'
    assert search_terms("dft") == "dft"


def test_synonym_expansion_is_deterministic_deduplicated_and_labelled(tmp_path: Path) -> None:
    settings = load_settings(var_dir=tmp_path)
    first, version = expand_queries(settings)  # no LLM endpoint configured: the synonym table
    again, _ = expand_queries(settings)
    assert first == again
    assert version == load_vocabulary(settings.crawl_vocabulary).version
    texts = [q.text for q in first]
    assert len(texts) == len(set(texts))
    assert 200 <= len(texts) <= settings.crawl_max_queries
    assert {q.method for q in first} == {"seed", "synonym-table"}
    dft = next(q for q in first if q.text == "dft")
    assert (dft.seed, dft.domain, dft.method) == ("density functional theory", "chemistry", "synonym-table")
    # round-robin over domains: each domain's first seed (and its variants) before any second seed
    seeds = [q for q in first if q.method == "seed"]
    assert [q.domain for q in seeds[:5]] == list(load_vocabulary(settings.crawl_vocabulary).domains)
    assert first.index(seeds[4]) < 10


def test_bad_synonyms_are_rejected_with_reason_and_duplicates_dropped(tmp_path: Path) -> None:
    vocab = tmp_path / "v.json"
    vocab.write_text(json.dumps({"version": "t1", "domains": {"chem": ["dft", "quantum chemistry"]}}))
    syn = tmp_path / "s.json"
    syn.write_text(
        json.dumps({"synonyms": {"quantum chemistry": ["DFT", "qc: bad", "electronic structure"]}})
    )
    settings = load_settings(
        var_dir=tmp_path, crawl_vocabulary=vocab, crawl_synonyms=syn, crawl_max_queries=2
    )
    rejected: list[tuple[str, str, str]] = []
    queries = expand_with_synonyms(
        settings, load_vocabulary(vocab), lambda k, r, d: rejected.append((k, r, d))
    )
    assert [q.text for q in queries] == ["dft", "quantum chemistry"]  # "DFT" duplicate, cap 2
    assert ("qc: bad", "query_qualifier_not_allowed") in [(k, r) for k, r, _ in rejected]


def test_broken_vocabulary_is_a_config_error(tmp_path: Path) -> None:
    bad = tmp_path / "v.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="SCICODEPILE_CRAWL_VOCABULARY"):
        load_vocabulary(bad)
    bad.write_text(json.dumps({"version": "1", "domains": {"chem": [1, 2]}}))
    with pytest.raises(ConfigError, match="list of keywords"):
        load_vocabulary(bad)
