"""The opt-out list: repositories and owners who asked to be removed, applied on every run.

The file (``SCICODEPILE_CURATE_OPTOUT_FILE``) holds one entry a line; ``#`` starts a comment.
``owner/name`` removes one repository; ``owner`` or ``owner/*`` removes all of an owner's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from scicodepile.errors import ConfigError


@dataclass(frozen=True)
class OptOutList:
    """Parsed opt-out entries (lower-cased)."""

    repositories: frozenset[str]
    owners: frozenset[str]
    source: str = ""

    def matches(self, full_name: str) -> str | None:
        """The entry that removes ``full_name``, or None."""
        name = full_name.strip().lower()
        if name in self.repositories:
            return name
        owner = name.split("/", 1)[0]
        if owner in self.owners:
            return owner + "/*"
        return None

    def __len__(self) -> int:
        return len(self.repositories) + len(self.owners)


def load_optout(path: Path | None) -> OptOutList:
    """Read the opt-out file; a configured file that is missing is a configuration fault."""
    if path is None:
        return OptOutList(frozenset(), frozenset())
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"opt-out file {path} does not exist", setting="SCICODEPILE_CURATE_OPTOUT_FILE")
    repos: set[str] = set()
    owners: set[str] = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        entry = line.split("#", 1)[0].strip().lower()
        if not entry:
            continue
        if entry.endswith("/*"):
            owners.add(entry[:-2])
        elif "/" in entry:
            repos.add(entry)
        else:
            owners.add(entry)
    return OptOutList(frozenset(repos), frozenset(owners), str(path))
