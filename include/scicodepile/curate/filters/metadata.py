"""Repository metadata filters: stars, forks, archived, empty.

Unknown stars (a source that cannot tell, such as PyPI) skip the criterion: the repository is kept
and *flagged* (``stars_unknown``) rather than rejected or given invented stars.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from scicodepile.pipeline import Filter, Verdict


@dataclass
class RepoView:
    """What repository filters look at; built from a ``repositories`` row (or a test)."""

    id: int
    full_name: str
    stars: int | None = None
    forks: int | None = None
    is_fork: bool = False
    archived: bool = False
    size_kb: int | None = None
    license: str | None = None
    description: str | None = None
    flags: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_row(cls, row: Any) -> RepoView:
        """From a :class:`scicodepile.db.models.Repository`."""
        return cls(
            id=row.id,
            full_name=row.full_name,
            stars=row.stars,
            forks=row.forks,
            is_fork=row.is_fork,
            archived=row.archived,
            size_kb=row.size_kb,
            license=row.license,
            description=row.description,
            extra=dict(row.extra or {}),
        )


class MetadataFilter(Filter[RepoView]):
    """Rejects forks, archived and empty repositories and those below ``min_stars``."""

    name = "metadata"

    def __init__(self, min_stars: int = 10, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.min_stars = min_stars

    def filter(self, record: RepoView) -> Verdict:
        """Verdict from the metadata alone (no fetch needed)."""
        if record.is_fork:
            return Verdict.drop("fork", "forks duplicate their parent")
        if record.archived:
            return Verdict.drop("archived", "archived (read-only, unmaintained)")
        if record.size_kb == 0:
            return Verdict.drop("empty", "the source reports an empty repository")
        if record.stars is None:
            if "stars_unknown" not in record.flags:
                record.flags.append("stars_unknown")
            self.stats["flag:stars_unknown"] += 1
        elif record.stars < self.min_stars:
            return Verdict.drop("low_stars", f"{record.stars} < {self.min_stars}")
        return Verdict.ok()
