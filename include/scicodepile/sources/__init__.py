"""Repository sources: "github" (search API), "sample" (PyPI source distributions), "local" (folder).

``get_source(name, ctx)`` returns an object with ``discover(shard, num_shards, limit)`` yielding
:class:`~scicodepile.records.RepositoryRecord` and ``fetch(repo, workdir)`` returning a
:class:`FetchedSnapshot`: the raw archive or folder at a pinned commit.  The curate stage extracts it
safely (archives are untrusted input).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from scicodepile.errors import ConfigError

if TYPE_CHECKING:
    from scicodepile.runner import RunContext

SOURCE_NAMES = ("sample", "local", "github")


@dataclass(frozen=True)
class FetchedSnapshot:
    """A repository's content at a pinned commit: an archive (untrusted) or a folder."""

    commit: str
    path: Path
    kind: Literal["tar.gz", "zip", "dir"]


def get_source(name: str, ctx: RunContext) -> Any:
    """The source called ``name``, configured from the run context (settings, path, manifest)."""
    if name == "sample":
        from scicodepile.sources.sample import SampleSource

        return SampleSource(ctx.settings, manifest=ctx.manifest)
    if name == "local":
        from scicodepile.sources.local import LocalSource

        if ctx.path is None:
            raise ConfigError("the local source needs a folder of repositories (--path DIR)")
        return LocalSource(ctx.settings, ctx.path)
    if name == "github":
        from scicodepile.sources.github import GitHubSource

        return GitHubSource(ctx.settings)
    raise ConfigError(f"unknown source {name!r}; sources are {', '.join(SOURCE_NAMES)}")


__all__ = ["SOURCE_NAMES", "FetchedSnapshot", "get_source"]
