"""The object-store interface and its local-folder backend.

Writes are atomic: a reader sees the whole object or nothing (local: temp file + ``os.replace``;
S3: an object appears only when its upload completes).  Immutable content is stored under its
sha256 (:meth:`ObjectStore.put_content_addressed`), so storing it twice costs nothing.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from scicodepile.errors import SciCodePileError

_KEY_RE = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._=+@,:/-]*$")


class ObjectNotFound(SciCodePileError, KeyError):
    """No object under that key."""


class InvalidKey(SciCodePileError, ValueError):
    """A key that could escape the store or that S3 would treat differently."""


def validate_key(key: str) -> str:
    """Keys are relative, '/'-separated, without '.' or '..' segments, empty segments or odd bytes."""
    if not key or len(key) > 1024 or not _KEY_RE.match(key):
        raise InvalidKey(f"invalid object key {key!r}")
    parts = key.split("/")
    if any(p in ("", ".", "..") for p in parts):
        raise InvalidKey(f"invalid object key {key!r}")
    return key


@dataclass(frozen=True)
class ObjectInfo:
    key: str
    size: int


def sha256_file(path: Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


class ObjectStore(ABC):
    """A flat key -> bytes store.  Keys are built by :mod:`scicodepile.store.keys`."""

    name: str = "abstract"

    @abstractmethod
    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> int:
        """Upload a local file atomically; return its size."""

    @abstractmethod
    def get_file(self, key: str, path: Path) -> Path:
        """Download an object to a local path (written atomically)."""

    @abstractmethod
    def open(self, key: str) -> BinaryIO:
        """A readable binary stream over the object."""

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo | None:
        """Size of the object, or None when it does not exist."""

    @abstractmethod
    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        """Objects whose key starts with ``prefix``, in key order."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove an object; a missing object is not an error."""

    @abstractmethod
    def check(self) -> None:
        """Fail with a ConfigError naming the setting when the store cannot be used."""

    def location(self, key: str) -> str:
        """A human-readable address of the object (path or s3:// URL)."""
        return key

    # -- conveniences built on the primitives -----------------------------------------------
    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> int:
        with tempfile.NamedTemporaryFile(delete=False) as tmp:
            tmp.write(data)
        try:
            return self.put_file(key, Path(tmp.name), content_type)
        finally:
            os.unlink(tmp.name)

    def get_bytes(self, key: str) -> bytes:
        with self.open(key) as fh:
            return fh.read()

    def exists(self, key: str) -> bool:
        return self.stat(key) is not None

    def put_content_addressed(self, prefix: str, data: bytes, suffix: str = "") -> str:
        """Store immutable bytes under ``prefix/<sha256><suffix>``; skip the upload when present."""
        digest = hashlib.sha256(data).hexdigest()
        key = f"{prefix.rstrip('/')}/{digest[:2]}/{digest}{suffix}"
        if not self.exists(key):
            self.put_bytes(key, data)
        return key

    def put_file_content_addressed(self, prefix: str, path: Path, suffix: str = "") -> str:
        digest = sha256_file(path)
        key = f"{prefix.rstrip('/')}/{digest[:2]}/{digest}{suffix}"
        if not self.exists(key):
            self.put_file(key, path)
        return key


class LocalObjectStore(ObjectStore):
    """Objects as files under a root folder; the default for embedded mode."""

    name = "local"

    def __init__(self, root: Path) -> None:
        self.root = Path(root).resolve()

    def _path(self, key: str) -> Path:
        path = (self.root / validate_key(key)).resolve()
        if self.root not in path.parents:
            raise InvalidKey(f"key {key!r} escapes the store")
        return path

    def check(self) -> None:
        from scicodepile.errors import ConfigError

        try:
            self.root.mkdir(parents=True, exist_ok=True)
            probe = self.root / ".write-probe"
            probe.write_bytes(b"")
            probe.unlink()
        except OSError as exc:
            raise ConfigError(
                f"local object store {self.root} is not writable: {exc.strerror}",
                setting="SCICODEPILE_STORE_ROOT",
            ) from None

    def _publish(self, key: str, write: Callable[[BinaryIO], None]) -> int:
        """Write to a hidden temp file beside the target, fsync, then rename over it (atomic)."""
        dest = self._path(key)
        dest.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=dest.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as out:
                write(out)
                out.flush()
                os.fsync(out.fileno())
            os.replace(tmp, dest)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        return dest.stat().st_size

    def put_file(self, key: str, path: Path, content_type: str = "application/octet-stream") -> int:
        def copy(out: BinaryIO) -> None:
            with open(path, "rb") as src:
                shutil.copyfileobj(src, out, 1 << 20)

        return self._publish(key, copy)

    def put_bytes(self, key: str, data: bytes, content_type: str = "application/octet-stream") -> int:
        return self._publish(key, lambda out: out.write(data))

    def get_file(self, key: str, path: Path) -> Path:
        src = self._path(key)
        if not src.is_file():
            raise ObjectNotFound(key)
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
        os.close(fd)
        shutil.copyfile(src, tmp)
        os.replace(tmp, path)
        return path

    def open(self, key: str) -> BinaryIO:
        try:
            return open(self._path(key), "rb")
        except (FileNotFoundError, IsADirectoryError):
            raise ObjectNotFound(key) from None

    def stat(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        return ObjectInfo(key, path.stat().st_size) if path.is_file() else None

    def list(self, prefix: str = "") -> Iterator[ObjectInfo]:
        if not self.root.exists():
            return
        keys = []
        for dirpath, dirnames, filenames in os.walk(self.root):
            dirnames[:] = [d for d in dirnames if not d.startswith(".")]
            for name in filenames:
                if name.startswith("."):
                    continue
                rel = Path(dirpath, name).relative_to(self.root).as_posix()
                if rel.startswith(prefix):
                    keys.append(rel)
        for key in sorted(keys):
            yield ObjectInfo(key, (self.root / key).stat().st_size)

    def delete(self, key: str) -> None:
        self._path(key).unlink(missing_ok=True)

    def location(self, key: str) -> str:
        return str(self._path(key)) if key else str(self.root)
