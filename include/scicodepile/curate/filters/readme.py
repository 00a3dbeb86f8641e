"""The README check: does the README describe a real computational implementation in a science domain?

Two methods, always labelled in the result (``method``):

- ``llm``: the LLM layer answers ``{"verdict", "domain", "evidence"}`` as validated JSON (prompt
  ``llm/prompts/readme_check.j2``; the README is inserted as delimited, untrusted data).  The answer
  is then *checked here*: the evidence quote must occur in the README, and must not quote an
  instruction aimed at the model ("ignore previous instructions", "answer yes" ...).  A README cannot
  talk its way in: an answer that fails the checks is discarded and the heuristic decides, labelled
  ``heuristic`` with ``llm_rejected`` saying why.
- Before either method sees it, the README is *defused* (:func:`defuse_readme`): control characters,
  invisible zero-width/bidi characters and HTML comments (hidden on GitHub, a favourite place for
  instructions) are removed, and chat-template tokens (``<|im_start|>``, ``[INST]``, ``</s>``,
  ``<<SYS>>``) and marker look-alikes (``<<<``) are broken apart so they stay text.  Injection
  phrases are looked for after NFKC normalisation (full-width and other compatibility look-alikes).
  A README that addresses the model cannot buy a "yes": when it is flagged and the heuristic says
  no, the LLM's "yes" is discarded (``llm_rejected = "injection_suspected_unconfirmed"``).
- ``heuristic``: a documented keyword classifier (``include/data/readme_heuristic.json``), used when
  no LLM is configured.  Its evidence is the README line holding its strongest domain keyword.
"""

from __future__ import annotations

import json
import re
import unicodedata
from dataclasses import asdict, dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from scicodepile.curate.filters.metadata import RepoView
from scicodepile.pipeline import Filter, Verdict
from scicodepile.settings import DATA_DIR

README_NAMES = ("readme.md", "readme.rst", "readme.txt", "readme", "readme.markdown", "readme.org")

INJECTION = re.compile(
    r"ignore\s+(?:all\s+|any\s+)?(?:the\s+)?(?:previous|prior|above|earlier|preceding|your)\s+"
    r"(?:instructions?|prompts?|rules?|directions?)"
    r"|disregard\s+(?:all\s+|any\s+)?(?:the\s+)?(?:previous|prior|above|earlier|your)"
    r"|(?:answer|respond|reply|say|output)\s+(?:with\s+)?[\"'“]?(?:yes|true)\b"
    r"|return\s+(?:with\s+)?[\"'“]?yes\b"  # not "return true": code examples say that
    r"|\"verdict\"\s*:\s*\"yes\""
    r"|you\s+are\s+now\s+|new\s+instructions?\s*:|system\s+prompt|<\|im_start\|>|\[/?INST\]"
    # addressing the screener, role lines, forged data markers, verdict talk
    r"|(?:note|message|instructions?)\s+(?:to|for)\s+(?:the\s+)?(?:reviewer|model|ai|assistant|llm|"
    r"classifier|screener|grader|bot)\b"
    r"|\b(?:answer|respond|reply)\b[^.\n]{0,40}\b(?:yes|true)\b"
    r"|\b(?:classify|label|mark)\s+(?:this|it)\s+as\b|\bverdict\b"
    r"|^\W{0,4}(?:system|assistant)\s*:|<\|[a-z_]{2,20}\|>|<</?SYS>>"
    r"|<<<\s*(?:BEGIN|END)\b|\bend\s+of\s+(?:the\s+)?(?:untrusted|readme|data|input)\b",
    re.IGNORECASE | re.MULTILINE,
)
"""Phrases that address the model rather than describe software.  An evidence quote containing one
is refused; a README containing one is flagged ``readme_injection_suspected``."""

_INVISIBLE = re.compile("[\u00ad\u200b-\u200f\u202a-\u202e\u2060-\u2069\ufeff]")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_HTML_COMMENT = re.compile(r"<!--[\s\S]*?(?:-->|$)")
_CHAT_TOKEN = re.compile(r"<\|[^|<>\n]{0,40}\|>|</?s>|\[/?INST\]|<</?SYS>>|<<<")


def defuse_readme(text: str) -> str:
    """The README as both methods see it: newlines normalised; control characters, invisible
    (zero-width, bidi) characters and HTML comments removed; chat-template tokens and ``<<<`` marker
    look-alikes broken apart (``<|im_start|>`` -> ``< |im_start|>``) so a tokenizer reads them as text."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    text = _INVISIBLE.sub("", _CONTROL.sub("", text))
    text = _HTML_COMMENT.sub(" ", text)
    return _CHAT_TOKEN.sub(lambda m: m.group(0)[0] + " " + m.group(0)[1:], text)


def injection_suspected(text: str) -> bool:
    """Whether ``text`` holds a phrase aimed at the model (after NFKC: full-width look-alikes count)."""
    return INJECTION.search(unicodedata.normalize("NFKC", _INVISIBLE.sub("", text))) is not None


class ReadmeVerdict(BaseModel):
    """The LLM's answer (validated JSON)."""

    verdict: Literal["yes", "no"]
    domain: str = Field(default="", max_length=64)
    evidence: str = Field(default="", max_length=600)


@dataclass
class ReadmeCheck:
    """The outcome of the README check for one repository (stored in ``repositories.extra``)."""

    verdict: Literal["yes", "no"]
    domain: str | None
    evidence: str
    method: Literal["llm", "heuristic"]
    model: str | None = None
    prompt_version: str | None = None
    readme_path: str | None = None
    flags: list[str] = field(default_factory=list)
    llm_rejected: str | None = None
    scores: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


# ------------------------------------------------------------------------------------- README
def find_readme(root: Path, files: list[str]) -> str | None:
    """The top-level README of a tree (relative path), if any."""
    top = {f.lower(): f for f in files if "/" not in f}
    for name in README_NAMES:
        if name in top:
            return top[name]
    for lower, original in sorted(top.items()):
        if lower.startswith("readme"):
            return original
    return None


def read_readme(root: Path, rel: str, max_chars: int) -> str:
    """README text cut to ``max_chars`` (decoded like code files: a byte cut inside a UTF-8 character
    no longer turns the whole README into Latin-1 mojibake)."""
    from scicodepile.curate.extract import decode_text

    with open(root / rel, "rb") as fh:
        data = fh.read(max_chars * 4)
    return decode_text(data).text[:max_chars]


def _squash(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def quote_occurs(quote: str, text: str) -> bool:
    """Whether ``quote`` occurs in ``text`` (case and whitespace differences ignored)."""
    q = _squash(quote.strip().strip("\"'“”…").rstrip("."))
    return bool(q) and q in _squash(text)


# ---------------------------------------------------------------------------------- heuristic
@dataclass(frozen=True)
class HeuristicTable:
    version: int
    min_domain_hits: int
    min_implementation_hits: int
    strong_implementation_hits: int
    domains: dict[str, tuple[re.Pattern[str], ...]]
    implementation: tuple[str, ...]
    negative: tuple[re.Pattern[str], ...]


def _word(term: str) -> re.Pattern[str]:
    return re.compile(r"(?<![A-Za-z0-9])" + re.escape(term.lower()) + r"(?![A-Za-z0-9])")


@lru_cache(maxsize=2)
def load_heuristic(path: Path = DATA_DIR / "readme_heuristic.json") -> HeuristicTable:
    """Load the keyword tables of the heuristic classifier."""
    data = json.loads(Path(path).read_text(encoding="utf-8"))
    return HeuristicTable(
        version=int(data["version"]),
        min_domain_hits=int(data["min_domain_hits"]),
        min_implementation_hits=int(data["min_implementation_hits"]),
        strong_implementation_hits=int(data["strong_implementation_hits"]),
        domains={d: tuple(_word(k) for k in kws) for d, kws in data["domains"].items()},
        implementation=tuple(k.lower() for k in data["implementation"]),
        negative=tuple(_word(k) for k in data["negative"]),
    )


def heuristic_check(text: str, table: HeuristicTable | None = None) -> ReadmeCheck:
    """Classify a README with keywords (see ``include/data/readme_heuristic.json``).

    Instructions inside the README are irrelevant here: only domain and implementation vocabulary
    counts, and phrases aimed at a model are flagged.
    """
    table = table or load_heuristic()
    lower = text.lower()
    per_domain: dict[str, list[re.Match[str]]] = {}
    for domain, patterns in table.domains.items():
        hits = [m for p in patterns if (m := p.search(lower))]
        if hits:
            per_domain[domain] = hits
    best = max(per_domain, key=lambda d: (len(per_domain[d]), -list(table.domains).index(d)), default=None)
    domain_hits = len(per_domain.get(best, [])) if best else 0
    impl_hits = sum(1 for k in table.implementation if k in lower)
    negatives = [p.pattern for p in table.negative if p.search(lower)]
    flags = ["readme_injection_suspected"] if injection_suspected(text) else []
    named_domain = domain_hits >= table.min_domain_hits or (
        domain_hits >= 1 and impl_hits >= table.strong_implementation_hits
    )
    yes = named_domain and impl_hits >= table.min_implementation_hits and len(negatives) * 3 < impl_hits
    evidence = ""
    if best:
        first = min(per_domain[best], key=lambda m: m.start())
        evidence = _line_around(text, first.start())
    return ReadmeCheck(
        verdict="yes" if yes else "no",
        domain=best if yes else None,
        evidence=evidence,
        method="heuristic",
        prompt_version=f"heuristic-v{table.version}",
        flags=flags,
        scores={
            "domain_hits": domain_hits,
            "implementation_hits": impl_hits,
            "negative_hits": len(negatives),
        },
    )


def _line_around(text: str, pos: int, limit: int = 240) -> str:
    start = text.rfind("\n", 0, pos) + 1
    end = text.find("\n", pos)
    line = text[start : end if end != -1 else len(text)].strip()
    if len(line) > limit:
        offset = max(0, pos - start - limit // 2)
        line = line[offset : offset + limit].strip()
    return line


# ---------------------------------------------------------------------------------------- LLM
def verify_llm_verdict(answer: ReadmeVerdict, readme: str) -> str | None:
    """Why an LLM answer must be discarded, or None when it holds up against the README."""
    evidence = answer.evidence.strip()
    if answer.verdict == "yes" and not evidence:
        return "evidence_missing"
    if evidence and not quote_occurs(evidence, readme):
        return "evidence_not_in_readme"
    if evidence and injection_suspected(evidence):
        return "evidence_quotes_injection"
    return None


def llm_checks(client: Any, readmes: list[str]) -> list[tuple[ReadmeVerdict | None, str | None, Any]]:
    """Ask the LLM about many READMEs at once: ``(answer or None, rejection reason, LLMResult)``."""
    results = client.structured_many(
        "readme_check", [{"readme": r} for r in readmes], ReadmeVerdict, max_new_tokens=256
    )
    out = []
    for res, readme in zip(results, readmes, strict=True):
        if not res.ok or res.value is None:
            out.append((None, f"llm_invalid:{res.rejection_reason or 'no answer'}"[:120], res))
            continue
        answer = (
            res.value
            if isinstance(res.value, ReadmeVerdict)
            else ReadmeVerdict.model_validate(res.value.model_dump())
        )
        reason = verify_llm_verdict(answer, readme)
        out.append((None if reason else answer, reason, res))
    return out


def check_readmes(readmes: list[str], client: Any | None = None) -> list[ReadmeCheck]:
    """README checks for many READMEs: the LLM when ``client`` is given, else the heuristic.

    An LLM answer that fails verification falls back to the heuristic, labelled as such; so does a
    "yes" for a README flagged as addressing the model that the heuristic does not confirm.
    """
    originals = readmes
    readmes = [defuse_readme(r) for r in readmes]
    heuristics = [heuristic_check(r) for r in readmes]
    for heur, original in zip(heuristics, originals, strict=True):
        # an instruction hidden in what defusing removed (an HTML comment) still flags the README
        if not heur.flags and injection_suspected(original):
            heur.flags.append("readme_injection_suspected")
    if client is None:
        return heuristics
    checks = []
    for (answer, reason, res), heur in zip(llm_checks(client, readmes), heuristics, strict=True):
        if answer is not None and answer.verdict == "yes" and heur.flags and heur.verdict != "yes":
            answer, reason = None, "injection_suspected_unconfirmed"
        if answer is None:
            heur.llm_rejected = reason
            heur.model = getattr(res, "model", None)
            checks.append(heur)
            continue
        checks.append(
            ReadmeCheck(
                verdict=answer.verdict,
                domain=(answer.domain or None) if answer.verdict == "yes" else None,
                evidence=answer.evidence.strip(),
                method="llm",
                model=res.model,
                prompt_version=res.prompt_version,
                flags=list(heur.flags),
            )
        )
    return checks


class ReadmeFilter(Filter[RepoView]):
    """Keeps repositories whose README check (``record.extra['readme_check']``) said yes."""

    name = "readme"

    def filter(self, record: RepoView) -> Verdict:
        """Verdict from the already computed check (checks are batched for the LLM)."""
        check = record.extra.get("readme_check")
        if not check:
            return Verdict.drop("no_readme", "no README and no description to judge")
        if check["verdict"] != "yes":
            return Verdict.drop("readme_not_scientific_code", f"{check['method']}: {check['evidence'][:200]}")
        return Verdict.ok()
