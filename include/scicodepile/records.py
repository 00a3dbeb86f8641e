"""Record types that flow between stages.  Every record carries its provenance (source, repository;
files add commit, path and license in the F1 schema)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class RepositoryRecord:
    """A candidate repository as a source reports it, before it is stored."""

    source: str
    source_id: str
    full_name: str
    url: str | None = None
    description: str | None = None
    stars: int | None = None
    forks: int | None = None
    license: str | None = None
    topics: list[str] = field(default_factory=list)
    language: str | None = None
    is_fork: bool = False
    archived: bool = False
    size_kb: int | None = None
    default_branch: str | None = None
    created_at: str | None = None
    pushed_at: str | None = None
    domain: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
