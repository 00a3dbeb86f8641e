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
import tempfile
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from scicodepile.crawl.windows import parse_instant
from scicodepile.errors import ConfigError
from scicodepile.pipeline import shard_of
from scicodepile.records import RepositoryRecord
from scicodepile.settings import Settings
from scicodepile.sources.sample import sha256_file
from scicodepile.text import clean_text

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


MAX_METADATA_BYTES = 1 << 20
MAX_NAME_CHARS = 256  # the repository key's column
_INT_MAX = 2**31 - 1


def _entry_name(path: Path) -> str | None:
    if path.name.startswith(".") or path.name.endswith(".metadata.json"):
        return None
    if path.is_dir():
        return path.name
    for suffix in ARCHIVE_SUFFIXES:
        if path.is_file() and path.name.endswith(suffix):
            return path.name[: -len(suffix)]
    return None


def printable(name: str) -> str:
    """A file name as a storable, readable key: control characters and undecodable bytes escaped."""
    return name.encode("unicode_escape", "backslashreplace").decode("ascii")[:500]


def name_problem(path: Path, name: str) -> tuple[str, str] | None:
    """Why an entry cannot be a repository, as (reason, detail); None when it can.

    A symlink (it may point anywhere on the machine: an archive or folder outside the mirror), a name
    that is not UTF-8 (undecodable bytes), one with control characters, or one too long for the
    repository's key.
    """
    if path.is_symlink():
        return "symlink_entry", f"{printable(path.name)} is a symlink (to {printable(os.readlink(path))})"
    if any(0xDC80 <= ord(c) <= 0xDCFF for c in name):
        return "invalid_name", f"{printable(path.name)} is not valid UTF-8"
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        return "invalid_name", f"{printable(path.name)} holds control characters"
    if len(name) > MAX_NAME_CHARS:
        return "invalid_name", f"a name of {len(name)} characters (limit {MAX_NAME_CHARS})"
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


def is_git_repo(folder: Path) -> bool:
    """A git repository whose ``.git`` is a real folder inside it (a ``.git`` file or symlink could
    point at another repository anywhere on the machine)."""
    dot_git = folder / ".git"
    return dot_git.is_dir() and not dot_git.is_symlink()


def git_archive(folder: Path, commit: str, out: Path) -> None:
    """``git archive`` of ``commit`` without running anything the repository configures.

    A repository's own ``.git/config`` is untrusted: ``git archive`` inside it would run the smudge
    command of any filter its ``.gitattributes`` names (code execution on the crawl host).  So the
    objects are first cloned into a bare repository with a fresh configuration (a local clone copies
    or hard-links objects and reads nothing executable from the source), and archived from there.
    """
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".git-clone-") as tmp:
        clone = Path(tmp) / "repo.git"
        for args in (
            ["clone", "--quiet", "--bare", "--", str(folder), str(clone)],
            ["-C", str(clone), "archive", "--format=tar.gz", "-o", str(out), commit],
        ):
            subprocess.run(["git", *args], check=True, capture_output=True, timeout=600)


def git_head(folder: Path) -> str | None:
    if not is_git_repo(folder):
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
        if path.is_dir() and is_git_repo(path):
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


_LIMITS = {"license": 128, "description": 20_000, "url": 2048, "domain": 64, "pushed_at": 40}


def _checked_metadata(data: dict[str, Any]) -> dict[str, Any]:
    """The known fields of a metadata file, type- and range-checked; ``ValueError`` names the field."""
    out: dict[str, Any] = {}
    for key, kind in _META_FIELDS.items():
        value = data.get(key)
        if value is None:
            continue
        if not isinstance(value, kind) or isinstance(value, bool):
            raise ValueError(f"field {key!r} must be {kind.__name__}")
        if kind is int and not 0 <= value <= _INT_MAX:
            raise ValueError(f"field {key!r} out of range: {value}")
        if kind is str:
            if len(value) > _LIMITS[key] * 4:
                raise ValueError(f"field {key!r} is {len(value)} characters long")
            value = clean_text(value, _LIMITS[key])
        out[key] = value
    if "topics" in out:
        if not all(isinstance(t, str) for t in out["topics"]):
            raise ValueError("field 'topics' must be a list of strings")
        out["topics"] = [clean_text(t, 100) for t in out["topics"][:50]]
    if "url" in out and not out["url"].startswith(("http://", "https://")):
        raise ValueError("field 'url' must be an http(s) URL")
    if "pushed_at" in out:
        try:
            when = parse_instant(out["pushed_at"])
        except ValueError:
            raise ValueError(f"field 'pushed_at' is not an ISO date: {out['pushed_at'][:40]!r}") from None
        if when > datetime.now(UTC) + timedelta(days=1):
            raise ValueError(f"field 'pushed_at' is in the future: {out['pushed_at']}")
    return out


class LocalSource:
    """Repositories in a local folder."""

    name = "local"

    def __init__(self, settings: Settings, path: Path) -> None:
        self.settings = settings
        self.path = Path(path)
        if not self.path.is_dir():
            raise ConfigError(f"local source folder {self.path} does not exist or is not a folder")

    def entries(self, on_reject: RejectFn | None = None) -> list[tuple[str, Path]]:
        """(name, path) of every repository in the folder, sorted by name; first of duplicates wins.

        Symlinked entries and names that cannot be stored (see :func:`name_problem`) are skipped and,
        with ``on_reject``, recorded.
        """
        seen: dict[str, Path] = {}
        for child in sorted(self.path.iterdir()):
            name = _entry_name(child)
            if not name or name in seen:
                continue
            if problem := name_problem(child, name):
                log.warning("local entry %s skipped: %s", printable(child.name), problem[1])
                if on_reject:
                    on_reject(printable(child.name), *problem)
                continue
            seen[name] = child
        return sorted(seen.items())

    def read_metadata(self, name: str, on_reject: RejectFn | None) -> dict[str, Any]:
        meta_path = self.path / f"{name}.metadata.json"
        try:
            if not meta_path.is_file() and not meta_path.is_symlink():
                return {}
        except OSError:  # NAME.metadata.json longer than the file system allows: there is none
            return {}
        try:
            if meta_path.is_symlink():  # could point at any file on the machine
                raise ValueError("a symlink; metadata files must be regular files in the folder")
            size = meta_path.stat().st_size
            if size > MAX_METADATA_BYTES:
                raise ValueError(f"{size} bytes (limit {MAX_METADATA_BYTES})")
            data = json.loads(meta_path.read_text(encoding="utf-8"))
            if not isinstance(data, dict):
                raise ValueError("not a JSON object")
            return _checked_metadata(data)
        except (ValueError, OSError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            nested = isinstance(exc, RecursionError)
            detail = "JSON nested too deeply" if nested else clean_text(str(exc), 500)
            log.warning("metadata %s ignored: %s", printable(meta_path.name), detail)
            if on_reject:
                on_reject(printable(meta_path.name), "invalid_metadata", detail)
            return {}

    def discover(
        self, shard: int = 0, num_shards: int = 1, limit: int | None = None, on_reject: RejectFn | None = None
    ) -> Iterator[RepositoryRecord]:
        """One record per entry of this shard, with metadata from ``NAME.metadata.json`` when present."""
        entries = self.entries(on_reject if shard == 0 else None)
        if limit is not None:
            entries = entries[:limit]
        for name, path in entries:
            if shard_of(name, num_shards) != shard:
                continue
            meta = self.read_metadata(name, on_reject)
            kind = "git" if path.is_dir() and is_git_repo(path) else ("dir" if path.is_dir() else "archive")
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
                git_archive(path, head, out)
                return FetchedSnapshot(commit=head, path=out, kind="tar.gz")
            return FetchedSnapshot(commit=f"tree:{tree_digest(path)}", path=path, kind="dir")
        kind = "zip" if path.name.endswith(".zip") else "tar.gz"
        return FetchedSnapshot(commit=f"sha256:{sha256_file(path)}", path=path, kind=kind)
