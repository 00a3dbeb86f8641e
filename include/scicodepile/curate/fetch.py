"""Safe extraction of untrusted repository archives (tar, tar.gz, zip) and folders.

Archives come from the internet, so every member is checked before a byte is written:

- names are relative, '/'-separated, without '..' segments, NUL bytes or drive letters
  (``path_traversal``, ``absolute_path``);
- symlinks and hard links are never materialised (``symlink`` / ``hardlink`` when they point inside
  the tree, ``symlink_escape`` / ``hardlink_escape`` when they point outside);
- device files, FIFOs and sockets are skipped (``special_file``);
- ``.gitmodules`` and the ``.git`` folder are skipped (``submodule``, ``vcs_metadata``): submodules
  are other repositories and are never followed;
- caps on total bytes, file count and compression ratio abort the whole archive
  (:class:`ArchiveRejected`) *before* the offending data is written; a single member over the
  per-file cap is skipped (``file_too_large``).

Files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a fresh folder, and the bytes written
are counted as they stream (a zip header cannot lie about its size).  Every member ends up either in
``ExtractionResult.files`` or in ``ExtractionResult.rejected`` with a reason: nothing is lost.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal

from scicodepile.errors import SciCodePileError

ArchiveKind = Literal["tar.gz", "tar", "zip", "dir"]
CHUNK = 1 << 16
RATIO_FLOOR_BYTES = 8 << 20
"""The compression-ratio cap applies once this many bytes are unpacked (tiny archives compress well)."""


class ArchiveRejected(SciCodePileError):
    """The archive as a whole is refused (a bomb, too many files, unreadable); ``reason`` says why."""

    def __init__(self, reason: str, detail: str) -> None:
        self.reason = reason
        self.detail = detail
        super().__init__(f"{reason}: {detail}")


@dataclass(frozen=True)
class ExtractionLimits:
    """Caps applied while extracting one archive."""

    max_total_bytes: int = 512 * 1024 * 1024
    max_files: int = 50_000
    max_ratio: float = 200.0
    max_file_bytes: int = 1_000_000

    @classmethod
    def from_settings(cls, settings: object) -> ExtractionLimits:
        """Limits from the ``curate_max_*`` settings."""
        return cls(
            max_total_bytes=settings.curate_max_archive_bytes,  # type: ignore[attr-defined]
            max_files=settings.curate_max_archive_files,  # type: ignore[attr-defined]
            max_ratio=settings.curate_max_compression_ratio,  # type: ignore[attr-defined]
            # big non-code files (data, images) are skipped per file, not fatal
            max_file_bytes=max(settings.curate_max_file_bytes, 1) * 8,  # type: ignore[attr-defined]
        )


@dataclass
class ExtractionResult:
    """What came out of one archive: extracted files (relative paths) and rejected members."""

    root: Path
    files: list[str] = field(default_factory=list)
    rejected: list[tuple[str, str, str]] = field(default_factory=list)  # (member name, reason, detail)
    total_bytes: int = 0
    declared_bytes: int = 0
    archive_bytes: int = 0
    prefix: str = ""

    def reject(self, name: str, reason: str, detail: str = "") -> None:
        self.rejected.append((name, reason, detail))


@dataclass
class _Member:
    name: str
    kind: Literal["file", "dir", "symlink", "hardlink", "special"]
    size: int
    link: str = ""
    opener: object = None  # callable returning a binary stream, for files


# ------------------------------------------------------------------------------------ names
def check_member_name(name: str) -> tuple[str | None, str | None]:
    """Return ``(safe relative path, None)`` or ``(None, reason)`` for an archive member name."""
    if "\x00" in name:
        return None, "path_traversal"
    norm = name.replace("\\", "/")
    if norm.startswith("/") or (len(norm) > 1 and norm[1] == ":") or norm.startswith("//"):
        return None, "absolute_path"
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None, "path_traversal"
    if not parts:
        return None, "empty_name"
    return "/".join(parts), None


def _link_escapes(member_path: str, target: str, *, hard: bool) -> bool:
    """Whether a link at ``member_path`` pointing at ``target`` resolves outside the tree."""
    target = target.replace("\\", "/")
    if target.startswith("/") or (len(target) > 1 and target[1] == ":"):
        return True
    base = "" if hard else posixpath.dirname(member_path)
    resolved = posixpath.normpath(posixpath.join(base, target))
    return resolved == ".." or resolved.startswith("../")


# --------------------------------------------------------------------------------- members
def _tar_members(path: Path) -> Iterator[tuple[_Member, tarfile.TarFile]]:
    try:
        tf = tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise ArchiveRejected("unreadable_archive", str(exc)) from None
    with tf:
        try:
            for info in tf:
                if info.isdir():
                    yield _Member(info.name, "dir", 0), tf
                elif info.isreg():
                    yield _Member(info.name, "file", info.size, opener=info), tf
                elif info.issym():
                    yield _Member(info.name, "symlink", 0, link=info.linkname), tf
                elif info.islnk():
                    yield _Member(info.name, "hardlink", 0, link=info.linkname), tf
                else:
                    yield _Member(info.name, "special", 0), tf
        except (tarfile.TarError, OSError, EOFError, zlibError) as exc:
            raise ArchiveRejected("unreadable_archive", str(exc)) from None


try:  # zlib.error is what a corrupt gzip stream raises mid-way
    from zlib import error as zlibError
except ImportError:  # pragma: no cover
    zlibError = OSError


def _zip_members(zf: zipfile.ZipFile) -> Iterator[_Member]:
    for info in zf.infolist():
        mode = (info.external_attr >> 16) & 0xFFFF
        if info.is_dir():
            yield _Member(info.filename, "dir", 0)
        elif mode and stat.S_ISLNK(mode):
            target = zf.read(info)[:4096].decode("utf-8", "replace") if info.file_size < 4096 else ""
            yield _Member(info.filename, "symlink", 0, link=target)
        elif mode and not stat.S_ISREG(mode) and stat.S_IFMT(mode):
            yield _Member(info.filename, "special", 0)
        else:
            yield _Member(info.filename, "file", info.file_size, opener=info)


# ---------------------------------------------------------------------------------- writing
def _write_stream(src: BinaryIO, dest: Path, limit: int) -> int:
    """Copy at most ``limit`` bytes into a new file; raise ValueError when the stream is longer."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(dest, flags, 0o644)
    written = 0
    try:
        with os.fdopen(fd, "wb") as out:
            while block := src.read(CHUNK):
                written += len(block)
                if written > limit:
                    raise ValueError(f"stream longer than declared/allowed {limit} bytes")
                out.write(block)
    except BaseException:
        dest.unlink(missing_ok=True)
        raise
    return written


def _safe_parent(root: Path, rel: str) -> Path:
    """Create the parent folders of ``rel`` under ``root``, refusing any symlinked component."""
    parent = root
    for part in rel.split("/")[:-1]:
        parent = parent / part
        if parent.is_symlink():
            raise ValueError(f"{parent} is a symlink")
        parent.mkdir(exist_ok=True)
    return parent


def _is_skipped_vcs(rel: str) -> str | None:
    parts = rel.split("/")
    if ".git" in parts[:-1] or parts[-1] == ".git":
        return "vcs_metadata"
    if parts[-1] == ".gitmodules":
        return "submodule"
    return None


# --------------------------------------------------------------------------------- extraction
def extract_archive(
    source: Path, kind: ArchiveKind, dest: Path, limits: ExtractionLimits | None = None
) -> ExtractionResult:
    """Extract ``source`` (an archive of ``kind`` or a folder) safely into the new folder ``dest``.

    Raises :class:`ArchiveRejected` when the archive as a whole must be refused (caps exceeded,
    unreadable); otherwise every member is either extracted or listed in ``rejected``.
    """
    limits = limits or ExtractionLimits()
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=False)
    dest = dest.resolve()
    result = ExtractionResult(root=dest)
    if kind == "dir":
        _copy_folder(Path(source), dest, limits, result)
        return result
    result.archive_bytes = Path(source).stat().st_size
    if kind in ("tar.gz", "tar"):
        for member, tf in _tar_members(Path(source)):
            _extract_member(member, dest, limits, result, lambda m, tf=tf: tf.extractfile(m.opener))
    elif kind == "zip":
        try:
            zf = zipfile.ZipFile(source)
        except (zipfile.BadZipFile, OSError) as exc:
            raise ArchiveRejected("unreadable_archive", str(exc)) from None
        with zf:
            for member in _zip_members(zf):
                _extract_member(member, dest, limits, result, lambda m, zf=zf: zf.open(m.opener))
    else:
        raise ValueError(f"unknown archive kind {kind!r}")
    _strip_common_folder(result)
    return result


def _strip_common_folder(result: ExtractionResult) -> None:
    """GitHub tarballs and sdists wrap everything in one folder: make paths relative to it.

    Only safe names count (a hostile '/etc/x' member does not prevent stripping); rejected members
    whose names were unsafe keep their original name in ``rejected``.
    """
    safe_rejected = [n for n, _, _ in result.rejected if check_member_name(n)[1] is None and n.split("/")[0]]
    heads = {n.split("/", 1)[0] if "/" in n else "" for n in result.files + safe_rejected}
    if len(heads) != 1 or "" in heads or not result.files:
        return
    head = heads.pop()
    if not (result.root / head).is_dir() or (result.root / head).is_symlink():
        return
    prefix = head + "/"
    result.prefix = prefix
    result.root = result.root / head
    result.files = [f.removeprefix(prefix) for f in result.files]
    result.rejected = [
        (n.removeprefix(prefix) if n in safe_rejected else n, r, d) for n, r, d in result.rejected
    ]


def _extract_member(
    member: _Member, dest: Path, limits: ExtractionLimits, result: ExtractionResult, open_member: object
) -> None:
    rel, reason = check_member_name(member.name)
    if rel is None:
        result.reject(member.name, reason or "path_traversal", "unsafe member name")
        return
    if member.kind == "dir":
        return  # folders are created on demand; an empty folder holds nothing to lose
    if (skip := _is_skipped_vcs(rel)) is not None:
        result.reject(rel, skip, "not part of the repository's own code")
        return
    if member.kind in ("symlink", "hardlink"):
        hard = member.kind == "hardlink"
        escapes = _link_escapes(rel, member.link, hard=hard)
        result.reject(rel, f"{member.kind}_escape" if escapes else member.kind, f"-> {member.link[:200]}")
        return
    if member.kind == "special":
        result.reject(rel, "special_file", "device, FIFO or socket")
        return
    # regular file: caps first, before any byte is written.  The ratio counts every regular member's
    # declared size (skipped ones too): a bomb is a bomb even when each member is skipped.
    if len(result.files) + 1 > limits.max_files:
        raise ArchiveRejected("too_many_files", f"more than {limits.max_files} files")
    result.declared_bytes += member.size
    ratio = result.declared_bytes / result.archive_bytes if result.archive_bytes else 0.0
    if result.declared_bytes > RATIO_FLOOR_BYTES and ratio > limits.max_ratio:
        raise ArchiveRejected(
            "compression_ratio",
            f"{result.declared_bytes} bytes declared by a {result.archive_bytes}-byte archive "
            f"(> {limits.max_ratio:g}x)",
        )
    if member.size > limits.max_file_bytes:
        result.reject(rel, "file_too_large", f"{member.size} bytes > {limits.max_file_bytes}")
        return
    if result.total_bytes + member.size > limits.max_total_bytes:
        raise ArchiveRejected("archive_too_large", f"more than {limits.max_total_bytes} bytes unpacked")
    try:
        parent = _safe_parent(dest, rel)
        target = parent / rel.rsplit("/", 1)[-1]
        src = open_member(member)  # type: ignore[operator]
        if src is None:
            result.reject(rel, "unreadable_member", "no data")
            return
        with src:
            written = _write_stream(src, target, min(member.size, limits.max_file_bytes))
    except FileExistsError:
        result.reject(rel, "duplicate_member", "the archive holds this path twice")
        return
    except (ValueError, OSError, zipfile.BadZipFile, tarfile.TarError, zlibError, EOFError) as exc:
        result.reject(rel, "unreadable_member", str(exc)[:200])
        return
    result.total_bytes += written
    result.files.append(rel)


def _copy_folder(source: Path, dest: Path, limits: ExtractionLimits, result: ExtractionResult) -> None:
    """Copy a local folder (mirror, clone) with the same rules as an archive; links never followed."""
    source = source.resolve()
    stack = [source]
    while stack:
        folder = stack.pop()
        with os.scandir(folder) as entries:
            for entry in sorted(entries, key=lambda e: e.name):
                rel = Path(entry.path).relative_to(source).as_posix()
                if entry.is_symlink():
                    target = os.readlink(entry.path)
                    escapes = _link_escapes(rel, target, hard=False)
                    result.reject(rel, "symlink_escape" if escapes else "symlink", f"-> {target[:200]}")
                elif entry.is_dir(follow_symlinks=False):
                    if entry.name == ".git":
                        result.reject(rel, "vcs_metadata", "not part of the repository's own code")
                    else:
                        stack.append(Path(entry.path))
                elif entry.is_file(follow_symlinks=False):
                    st = entry.stat(follow_symlinks=False)
                    member = _Member(rel, "file", st.st_size, opener=entry.path)
                    if st.st_nlink > 1:
                        pass  # a hard link inside a local folder is just another name for a file
                    _extract_member(member, dest, limits, result, _open_local)
                else:
                    result.reject(rel, "special_file", "device, FIFO or socket")


def _open_local(member: _Member) -> BinaryIO:
    fd = os.open(member.opener, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))  # type: ignore[arg-type]
    return os.fdopen(fd, "rb")


def archive_kind(path: Path) -> ArchiveKind:
    """Guess the kind of a fetched snapshot from its name (folder, .zip, .tar, else tar.gz)."""
    if path.is_dir():
        return "dir"
    name = path.name.lower()
    if name.endswith(".zip") or name.endswith(".whl"):
        return "zip"
    if name.endswith(".tar"):
        return "tar"
    return "tar.gz"
