"""Safe extraction of untrusted repository archives (tar, tar.gz, zip) and folders.

Archives come from the internet, so every member is checked before a byte is written:

- names are relative, '/'-separated, without '..' segments, NUL bytes or drive letters
  (``path_traversal``, ``absolute_path``), without control characters (newlines ...) or bytes that
  are not UTF-8 (``unsafe_name``), and within length and depth caps (``name_too_long``);
- symlinks and hard links are never materialised (``symlink`` / ``hardlink`` when they point inside
  the tree, ``symlink_escape`` / ``hardlink_escape`` when they point outside);
- device files, FIFOs and sockets are skipped (``special_file``);
- ``.gitmodules`` and the ``.git`` folder are skipped (``submodule``, ``vcs_metadata``): submodules
  are other repositories and are never followed;
- caps on total bytes, member count (links, devices and refused names count too: a flood of
  rejected members is a bomb of its own) and compression ratio abort the whole archive
  (:class:`ArchiveRejected`) *before* the offending data is written; a single member over the
  per-file cap is skipped (``file_too_large``);
- tar headers are read through a bounded reader: a long-name or PAX header larger than
  ``MAX_HEADER_BYTES`` is refused before it is read into memory (``oversized_header``), and an archive
  that stops without its end-of-archive block (truncated or corrupt mid-way, which ``tarfile`` reads
  as a silent end) is refused (``truncated_archive``) instead of silently losing members;
- zip: encrypted members (``encrypted_member``) and unknown compression methods
  (``unsupported_compression``) are skipped, and entries whose data overlap (the "better zip bomb"
  construction) refuse the archive (``overlapping_entries``).
- a file where a folder is needed, or the reverse, is ``path_conflict``; the same path twice is
  ``duplicate_member``.

Names and details recorded for rejected members are made printable (control characters and
non-UTF-8 bytes escaped), so they can be stored and shown.

Files are created with ``O_CREAT | O_EXCL | O_NOFOLLOW`` under a fresh folder, and the bytes written
are counted as they stream (a zip header cannot lie about its size).  Every member ends up either in
``ExtractionResult.files`` or in ``ExtractionResult.rejected`` with a reason: nothing is lost.
"""

from __future__ import annotations

import bz2
import gzip
import itertools
import lzma
import os
import posixpath
import re
import stat
import tarfile
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO, Literal
from zlib import error as zlibError  # what a corrupt gzip stream raises mid-way

from scicodepile.errors import SciCodePileError

ArchiveKind = Literal["tar.gz", "tar", "zip", "dir"]
CHUNK = 1 << 16
RATIO_FLOOR_BYTES = 8 << 20
"""The compression-ratio cap applies once this many bytes are unpacked (tiny archives compress well)."""
MAX_HEADER_BYTES = 1 << 20
"""Largest single read a tar header may ask for (GNU long names, PAX records); legit ones are tiny."""
MAX_NAME_BYTES = 1024
MAX_NAME_COMPONENT_BYTES = 255
MAX_NAME_DEPTH = 100
"""Name caps: beyond them paths break file systems and recursive tools (rmtree, os.walk)."""
NAME_REASONS = frozenset({"path_traversal", "absolute_path", "unsafe_name", "name_too_long", "empty_name"})
"""Reasons given for the member's name itself: such names are recorded as they were (made printable)."""
_READ_ERRORS = (
    OSError,
    EOFError,
    RuntimeError,
    zlibError,
    lzma.LZMAError,
    zipfile.BadZipFile,
    tarfile.TarError,
)
"""What reading a damaged member can raise (RuntimeError: an encrypted zip entry)."""
_UNSAFE_CHARS = re.compile(r"[\x01-\x1f\x7f-\x9f\ud800-\udfff]")
"""Control characters (newlines, escapes, C1) and lone surrogates (bytes that were not UTF-8)."""


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

    members_seen: int = 0
    folders_seen: int = 0

    def reject(self, name: str, reason: str, detail: str = "") -> None:
        """Record a member that is not extracted; name and detail are made printable for storage."""
        self.rejected.append((printable(name), reason, printable(detail)))


@dataclass
class _Member:
    name: str
    kind: Literal["file", "dir", "symlink", "hardlink", "special", "encrypted"]
    size: int
    link: str = ""
    opener: object = None  # callable returning a binary stream, for files


# ------------------------------------------------------------------------------------ names
def printable(text: str) -> str:
    """``text`` with NUL, control characters and lone surrogates escaped (``\\x0a``, ``\\udce9``).

    Rejected names and error details are stored in Postgres (which refuses NUL and non-UTF-8) and
    shown in reports (where a newline or an escape sequence would forge lines)."""
    if "\x00" not in text and not _UNSAFE_CHARS.search(text):
        return text
    return _UNSAFE_CHARS.sub(lambda m: ascii(m.group(0))[1:-1], text.replace("\x00", "\\x00"))


def check_member_name(name: str) -> tuple[str | None, str | None]:
    """Return ``(safe relative path, None)`` or ``(None, reason)`` for an archive member name."""
    if "\x00" in name:
        return None, "path_traversal"
    if _UNSAFE_CHARS.search(name):
        return None, "unsafe_name"
    norm = name.replace("\\", "/")
    if norm.startswith("/") or (len(norm) > 1 and norm[1] == ":") or norm.startswith("//"):
        return None, "absolute_path"
    parts = [p for p in norm.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return None, "path_traversal"
    if not parts:
        return None, "empty_name"
    rel = "/".join(parts)
    if (
        len(rel.encode("utf-8")) > MAX_NAME_BYTES
        or len(parts) > MAX_NAME_DEPTH
        or any(len(p.encode("utf-8")) > MAX_NAME_COMPONENT_BYTES for p in parts)
    ):
        return None, "name_too_long"
    return rel, None


def _link_escapes(member_path: str, target: str, *, hard: bool) -> bool:
    """Whether a link at ``member_path`` pointing at ``target`` resolves outside the tree."""
    target = target.replace("\\", "/")
    if target.startswith("/") or (len(target) > 1 and target[1] == ":"):
        return True
    base = "" if hard else posixpath.dirname(member_path)
    resolved = posixpath.normpath(posixpath.join(base, target))
    return resolved == ".." or resolved.startswith("../")


# --------------------------------------------------------------------------------- members
class _BoundedReader:
    """A read/seek/tell view of the decompressed tar stream that refuses any single read larger than
    ``MAX_HEADER_BYTES``: ``tarfile`` reads a whole GNU long-name or PAX header into memory at once,
    so a header declaring gigabytes (a few MB once gzipped) would otherwise exhaust memory."""

    def __init__(self, inner: BinaryIO) -> None:
        self.inner = inner

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0 or n > MAX_HEADER_BYTES:
            raise ArchiveRejected("oversized_header", f"a tar header asks to read {n} bytes at once")
        return self.inner.read(n)

    def seek(self, offset: int, whence: int = 0) -> int:
        return self.inner.seek(offset, whence)

    def tell(self) -> int:
        return self.inner.tell()

    def close(self) -> None:
        self.inner.close()

    def __enter__(self) -> _BoundedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _open_decompressed(path: Path) -> BinaryIO:
    """The tar stream of ``path``: gzip, bzip2 and xz by their magic bytes, else the file itself."""
    with open(path, "rb") as fh:
        magic = fh.read(6)
    if magic.startswith(b"\x1f\x8b"):
        return gzip.GzipFile(path, "rb")  # type: ignore[return-value]
    if magic.startswith(b"BZh"):
        return bz2.BZ2File(path, "rb")  # type: ignore[return-value]
    if magic.startswith(b"\xfd7zXZ\x00"):
        return lzma.LZMAFile(path, "rb")  # type: ignore[return-value]
    return open(path, "rb")


def _tar_members(path: Path) -> Iterator[tuple[_Member, tarfile.TarFile]]:
    stream = _BoundedReader(_open_decompressed(path))
    try:
        tf = tarfile.open(fileobj=stream, mode="r:")  # type: ignore[call-overload]
    except (tarfile.TarError, OSError, EOFError, zlibError, lzma.LZMAError) as exc:
        stream.close()
        raise ArchiveRejected("unreadable_archive", str(exc)) from None
    with tf, stream:
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
            # tarfile ends quietly at a truncated or invalid header: only a zero block is a real end
            stream.seek(tf.offset)
            end = stream.read(tarfile.BLOCKSIZE)
        except (tarfile.TarError, OSError, EOFError, zlibError, lzma.LZMAError) as exc:
            raise ArchiveRejected("unreadable_archive", str(exc)) from None
        if len(end) != tarfile.BLOCKSIZE or end.count(0) != tarfile.BLOCKSIZE:
            raise ArchiveRejected(
                "truncated_archive",
                f"no end-of-archive block at offset {tf.offset}: the archive is cut or corrupt there",
            )


def _check_zip_overlap(zf: zipfile.ZipFile) -> None:
    """Refuse entries whose data overlap another's (the "better zip bomb" reuses one compressed
    kernel for many entries); a legitimate zip never overlaps.  Each entry spans at least a 30-byte
    local header plus its compressed size from its header offset."""
    spans = sorted((i.header_offset, i.compress_size) for i in zf.infolist() if not i.is_dir())
    for (start, size), (next_start, _) in itertools.pairwise(spans):
        if next_start < start + 30 + size:
            raise ArchiveRejected(
                "overlapping_entries", f"entry at offset {next_start} overlaps the entry at offset {start}"
            )


def _zip_members(zf: zipfile.ZipFile) -> Iterator[_Member]:
    for info in zf.infolist():
        mode = (info.external_attr >> 16) & 0xFFFF
        if info.is_dir():
            yield _Member(info.filename, "dir", 0)
        elif info.flag_bits & 0x1:
            yield _Member(info.filename, "encrypted", info.file_size)
        elif mode and stat.S_ISLNK(mode):
            try:
                target = zf.read(info)[:4096].decode("utf-8", "replace") if info.file_size < 4096 else ""
            except (*_READ_ERRORS, NotImplementedError) as exc:
                target = f"(unreadable target: {exc})"
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


class _PathConflict(Exception):
    """A file stands where a folder is needed (or the reverse)."""


def _safe_parent(root: Path, rel: str) -> Path:
    """Create the parent folders of ``rel`` under ``root``, refusing any symlinked component."""
    parent = root
    for part in rel.split("/")[:-1]:
        parent = parent / part
        if parent.is_symlink():
            raise ValueError(f"{parent} is a symlink")
        try:
            parent.mkdir(exist_ok=True)
        except FileExistsError:
            raise _PathConflict(f"{part!r} is already a file, not a folder") from None
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
            _check_zip_overlap(zf)
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
    safe_rejected = [
        n
        for n, r, _ in result.rejected
        if r not in NAME_REASONS and check_member_name(n)[1] is None and n.split("/")[0]
    ]
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
    # every member counts against the caps, whatever becomes of it: a flood of links, devices or
    # refused names would otherwise become millions of rejection rows from a small archive
    if member.kind == "dir":
        result.folders_seen += 1
        if result.folders_seen > limits.max_files:
            raise ArchiveRejected("too_many_files", f"more than {limits.max_files} folders")
    else:
        result.members_seen += 1
        if result.members_seen > limits.max_files:
            raise ArchiveRejected("too_many_files", f"more than {limits.max_files} members")
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
    if member.kind == "encrypted":
        result.reject(rel, "encrypted_member", "password-protected zip entry")
        return
    # regular file: caps first, before any byte is written.  The ratio counts every regular member's
    # declared size (skipped ones too): a bomb is a bomb even when each member is skipped.
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
    except _PathConflict as exc:
        result.reject(rel, "path_conflict", str(exc))
        return
    except FileExistsError:
        if (dest / rel).is_dir() and not (dest / rel).is_symlink():
            result.reject(rel, "path_conflict", "already a folder, not a file")
        else:
            result.reject(rel, "duplicate_member", "the archive holds this path twice")
        return
    except NotImplementedError as exc:
        result.reject(rel, "unsupported_compression", str(exc)[:200])
        return
    except (ValueError, *_READ_ERRORS) as exc:
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
