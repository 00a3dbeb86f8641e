"""The seed vocabulary and the curated synonym table (versioned data files in ``include/data``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from scicodepile.errors import ConfigError


@dataclass(frozen=True)
class Vocabulary:
    """Seed keywords per domain, with the file's version (recorded with every query)."""

    version: str
    domains: dict[str, list[str]]

    @property
    def seeds(self) -> list[tuple[str, str]]:
        """(domain, keyword) pairs in file order."""
        return [(d, k) for d, words in self.domains.items() for k in words]


def _load_json(path: Path, setting: str) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"{path} does not exist", setting=setting) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path} is not valid JSON: {exc}", setting=setting) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path} must hold a JSON object", setting=setting)
    return data


def load_vocabulary(path: Path) -> Vocabulary:
    """Read and check the seed vocabulary: a version and non-empty keyword lists per domain."""
    setting = "SCICODEPILE_CRAWL_VOCABULARY"
    data = _load_json(path, setting)
    domains = data.get("domains")
    if not isinstance(data.get("version"), str) or not isinstance(domains, dict) or not domains:
        raise ConfigError(f"{path} needs a 'version' string and a 'domains' object", setting=setting)
    out: dict[str, list[str]] = {}
    for domain, words in domains.items():
        if not isinstance(words, list) or not all(isinstance(w, str) and w.strip() for w in words):
            raise ConfigError(f"{path}: domain {domain!r} must be a list of keywords", setting=setting)
        out[str(domain)] = [" ".join(w.lower().split()) for w in words]
    return Vocabulary(version=data["version"], domains=out)


def load_synonyms(path: Path) -> tuple[str, dict[str, list[str]]]:
    """(version, {seed: [synonym or abbreviation, ...]}) of the curated synonym table."""
    setting = "SCICODEPILE_CRAWL_SYNONYMS"
    data = _load_json(path, setting)
    table = data.get("synonyms")
    if not isinstance(table, dict):
        raise ConfigError(f"{path} needs a 'synonyms' object", setting=setting)
    return str(data.get("version", "0")), {
        " ".join(str(k).lower().split()): [str(v) for v in vals]
        for k, vals in table.items()
        if isinstance(vals, list)
    }
