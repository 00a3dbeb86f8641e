"""LLM query expansion against FakeTGI (a local server speaking TGI's API): validated, cached, labelled."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sqlalchemy import select

from scicodepile.crawl.queries import expand_queries
from scicodepile.db import migrate, session_scope
from scicodepile.db.models import Query
from scicodepile.settings import load_settings
from tests.fakes.tgi_server import FakeTGI


def _responder(request: dict[str, Any]) -> str:
    seeds = re.findall(r"^- (.+)$", request["prompt"], flags=re.M)
    queries = []
    for seed in seeds:
        queries.append({"seed": seed, "query": f"{seed} toolkit", "kind": "subtopic"})
        queries.append({"seed": seed, "query": f"{seed}: bad", "kind": "synonym"})  # invalid: a qualifier
    queries.append({"seed": "not asked for", "query": "stray", "kind": "synonym"})
    return json.dumps({"queries": queries})


def test_llm_expansion_is_validated_labelled_and_cached(tmp_path: Path) -> None:
    with FakeTGI(responder=_responder) as tgi:
        settings = load_settings(
            var_dir=tmp_path / "var", llm_endpoints=tgi.url, llm_model="fake/model", crawl_max_queries=1000
        )
        migrate(settings)
        rejected: list[tuple[str, str, str]] = []
        queries, _version = expand_queries(settings, on_reject=lambda k, r, d: rejected.append((k, r, d)))
        calls = tgi.calls
        assert calls == 20  # five domains, 40 seeds each, 10 seeds per prompt
        llm = [q for q in queries if q.method == "llm"]
        # 200 seeds, one of which ("sparse identification of nonlinear dynamics") becomes six words: rejected
        assert len(llm) == 199 and all(q.text == f"{q.seed} toolkit" for q in llm)
        assert {q.model for q in llm} == {"fake/model"} and all(q.prompt_version for q in llm)
        assert len([q for q in queries if q.method == "seed"]) == 200
        reasons = {r for _, r, _ in rejected}
        assert reasons == {"query_qualifier_not_allowed", "query_unknown_seed", "query_too_many_words"}

        again, _ = expand_queries(settings)
        assert again == queries
        assert tgi.calls == calls  # a rerun costs no LLM call


def test_crawl_records_the_method_of_each_query(tmp_path: Path) -> None:
    from scicodepile.crawl.stage import ensure_queries
    from scicodepile.runner import RunContext

    settings = load_settings(var_dir=tmp_path / "var", crawl_max_queries=12)
    migrate(settings)
    pairs = ensure_queries(RunContext(settings=settings, source="github"))
    assert len(pairs) == 12
    with session_scope(settings) as s:
        rows = s.scalars(select(Query)).all()
    assert {r.method for r in rows} == {"seed", "synonym-table"}  # no LLM configured: labelled as such
    assert all(r.vocabulary_version == "2026.11-1" for r in rows)
