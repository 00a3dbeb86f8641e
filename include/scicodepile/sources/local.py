"""The "local" source: a folder of repositories, for mirrors and air-gapped use.

Each entry is a git repository or plain folder ``NAME/`` or an archive ``NAME.tar.gz`` / ``NAME.zip``,
with an optional ``NAME.metadata.json`` beside it (stars, license, topics, description, url, domain).
Archives are untrusted: this module only hashes them; the curate stage extracts them safely.  A bad
metadata file is recorded as a rejection of the metadata (the repository is kept, without it).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from scicodepile.errors import ConfigError
from scicodepile.pipeline import shard_of
from scicodepile.records import RepositoryRecord
from scicodepile.settings import Settings
from scicodepile.sources.sample import sha256_file

log = logging.getLogger("scicodepile.sources")

RejectFn = Callable[[str, str, str], None]
ARCHIVE_SUFFIXES = (".tar.gz", ".zip")
_META_FIELDS = {
    "stars": int,
    "license": str,
    "topics": list,
    "description": str,
    "url": str,
    "domain": str,
    "forks": int,
    "pushed_at": str,
}


def _entry_name(path: Path) -> str | None:
    if path.name.startswith(".") or path.name.endswith(".metadata.json"):
        return None
    if path.is_dir() and not path.is_symlink():
        return path.name
    for suffix in ARCHIVE_SUFFIXES:
        if path.is_file() and path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return None


def tree_digest(folder: Path) -> str:
    """A content hash of a plain folder (paths and bytes; symlinks by target), its pinned "commit"."""
    digest = hashlib.sha256()
    for root, dirs, files in os.walk(folder, followlinks=False):
        dirs[:] = sorted(d for d in dirs if d != ".git")
        for name in sorted(files):
            path = Path(root, name)
            rel = path.relative_to(folder).as_posix()
            digest.update(rel.encode() + b"\0")
            if path.is_symlink():
                digest.update(b"link:" + os.readlink(path).encode())
            elif path.is_file():
                digest.update(sha256_file(path).encode())
    return digest.hexdigest()


def git_head(folder: Path) -> str | None:
    if not (folder / ".git").exists():
        return None
    proc = subprocess.run(
        ["git", "-C", str(folder), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    return proc.stdout.strip() if proc.returncode == 0 and proc.stdout.strip() else None


def last_change(path: Path) -> str | None:
    """When an entry last changed, as its ``pushed_at``: a git repository's HEAD commit time, else the
    newest modification time in the folder (or of the archive).  A change marks it for re-curation."""
    try:
        if path.is_dir() and (path / ".git").exists():
            proc = subprocess.run(
                ["git", "-C", str(path), "log", "-1", "--format=%cI"],
                capture_output=True, text=True, check=False, timeout=60,
            )  # fmt: skip
            if proc.returncode == 0 and proc.stdout.strip():
                return proc.stdout.strip()
        newest = path.lstat().st_mtime
        if path.is_dir():
            for root, dirs, files in os.walk(path, followlinks=False):
                dirs[:] = [d for d in dirs if d != ".git"]
                for name in files:
                    newest = max(newest, Path(root, name).lstat().st_mtime)
    except OSError:
        return None
    return datetime.fromtimestamp(newest, UTC).isoformat()


class LocalSource:
    """Repositories in a local folder."""

    name = "local"

    def __init__(self, settings: Settings, path: Path) -> None:
        self.settings = settings
        self.path = Path(path)
        if not self.path.is_dir():
            raise ConfigError(f"local source folder {self.path} does not exist or is not a folder")

    def entries(self) -> list[tuple[str, Path]]:
        """(name, path) of every repository in the folder, sorted by name; first of duplicates wins."""
        seen: dict[str, Path] = {}
        for child in sorted(self.path.iterdir()):
            name = _entry_name(child)
            if name and name not in seen:
                seen[name] = child
        return sorted(seen.items())

    def read_metadata(self, name: str, on_reject: RejectFn | None) -> dict[str, Any]:
        meta_path = self.path / f"{name}.metadata.json"
        if not meta_path.is_file():
            return {}
        try:
            data = json.loads(meta_path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            out: dict[str, Any] = {}
            for key, kind in _META_FIELDS.items():
                if data.get(key) is not None:
                    if not isinstance(data[key], kind) or isinstance(data[key], bool):
                        raise ValueError(f"field {key!r} must be {kind.__name__}")
                    out[key] = data[key]
            if "topics" in out:
                out["topics"] = [str(t) for t in out["topics"]][:50]
            return out
        except (ValueError, UnicodeDecodeError) as exc:
            log.warning("metadata %s ignored: %s", meta_path.name, exc)
            if on_reject:
                on_reject(meta_path.name, "invalid_metadata", str(exc)[:500])
            return {}

    def discover(
        self, shard: int = 0, num_shards: int = 1, limit: int | None = None, on_reject: RejectFn | None = None
    ) -> Iterator[RepositoryRecord]:
        """One record per entry of this shard, with metadata from ``NAME.metadata.json`` when present."""
        entries = self.entries()
        if limit is not None:
            entries = entries[:limit]
        for name, path in entries:
            if shard_of(name, num_shards) != shard:
                continue
            meta = self.read_metadata(name, on_reject)
            kind = (
                "git"
                if path.is_dir() and (path / ".git").exists()
                else ("dir" if path.is_dir() else "archive")
            )
            yield RepositoryRecord(
                source=self.name,
                source_id=name,
                full_name=name,
                url=meta.get("url"),
                description=meta.get("description"),
                stars=meta.get("stars"),
                forks=meta.get("forks"),
                license=meta.get("license"),
                topics=meta.get("topics", []),
                domain=meta.get("domain"),
                pushed_at=meta.get("pushed_at") or last_change(path),
                extra={"entry": path.name, "kind": kind},
            )

    def fetch(self, repo: Any, workdir: Path) -> Any:
        """Git repositories: ``git archive`` of HEAD; folders as they are; archives as they are."""
        from scicodepile.sources import FetchedSnapshot

        entries = dict(self.entries())
        path = entries.get(str(repo.source_id))
        if path is None:
            raise FileNotFoundError(f"{repo.source_id} is no longer in {self.path}")
        if path.is_dir():
            head = git_head(path)
            if head:
                workdir.mkdir(parents=True, exist_ok=True)
                out = workdir / f"{path.name}-{head[:12]}.tar.gz"
                subprocess.run(
                    ["git", "-C", str(path), "archive", "--format=tar.gz", "-o", str(out), head],
                    check=True,
                    capture_output=True,
                    timeout=600,
                )
                return FetchedSnapshot(commit=head, path=out, kind="tar.gz")
            return FetchedSnapshot(commit=f"tree:{tree_digest(path)}", path=path, kind="dir")
        kind = "zip" if path.name.endswith(".zip") else "tar.gz"
        return FetchedSnapshot(commit=f"sha256:{sha256_file(path)}", path=path, kind=kind)
