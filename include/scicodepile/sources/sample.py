"""The "sample" source: real scientific packages' source distributions from the package registry.

Each ``name==version`` line of the manifest (a setting; a trailing ``# domain: X`` comment, or a
``# domain: X`` line for the lines after it, sets the domain) is one "repository":
``pip download --no-binary :all: --no-deps`` fetches its sdist into ``var_dir/cache/sample/`` (once;
reruns reuse it), metadata comes from the sdist's ``PKG-INFO`` (name, summary, license, classifiers,
home page) read without extracting anything, and the sdist itself is the snapshot.  Stars are unknown
and recorded as null, never invented.
"""

from __future__ import annotations

import email.parser
import hashlib
import logging
import re
import subprocess
import sys
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scicodepile.errors import ConfigError
from scicodepile.pipeline import Progress, shard_of
from scicodepile.records import RepositoryRecord
from scicodepile.settings import Settings
from scicodepile.text import clean_text

log = logging.getLogger("scicodepile.sources")

RejectFn = Callable[[str, str, str], None]
_REQ = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==([A-Za-z0-9][A-Za-z0-9.+!_-]*)$")
_MAX_PKG_INFO = 1 << 20

CLASSIFIER_SPDX = {
    "MIT License": "MIT",
    "BSD License": "BSD-3-Clause",
    "Apache Software License": "Apache-2.0",
    "GNU General Public License v2 (GPLv2)": "GPL-2.0-only",
    "GNU General Public License v2 or later (GPLv2+)": "GPL-2.0-or-later",
    "GNU General Public License v3 (GPLv3)": "GPL-3.0-only",
    "GNU General Public License v3 or later (GPLv3+)": "GPL-3.0-or-later",
    "GNU Lesser General Public License v2 or later (LGPLv2+)": "LGPL-2.1-or-later",
    "GNU Lesser General Public License v3 (LGPLv3)": "LGPL-3.0-only",
    "GNU Lesser General Public License v3 or later (LGPLv3+)": "LGPL-3.0-or-later",
    "Mozilla Public License 2.0 (MPL 2.0)": "MPL-2.0",
    "ISC License (ISCL)": "ISC",
    "The Unlicense (Unlicense)": "Unlicense",
    "Python Software Foundation License": "PSF-2.0",
}
_SPDX_LIKE = re.compile(r"^[A-Za-z0-9.+-]+( (AND|OR|WITH) [A-Za-z0-9.+-]+)*$")


@dataclass(frozen=True)
class ManifestEntry:
    name: str
    version: str
    domain: str | None
    line: int

    @property
    def key(self) -> str:
        return f"{self.name}=={self.version}"


def read_manifest(path: Path) -> tuple[list[ManifestEntry], list[tuple[int, str]]]:
    """Entries of a manifest file and its invalid lines ``(line number, text)``."""
    if not path.is_file():
        raise ConfigError(f"sample manifest {path} does not exist", setting="SCICODEPILE_SAMPLE_MANIFEST")
    entries: list[ManifestEntry] = []
    bad: list[tuple[int, str]] = []
    domain: str | None = None
    seen: set[str] = set()
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if line.startswith("#"):
            if m := re.match(r"#\s*domain:\s*(\S+)", line):
                domain = m.group(1)
            continue
        line, _, comment = line.partition("#")
        line = line.strip()
        if not line:
            continue
        m = _REQ.match(line)
        if not m:
            bad.append((number, line))
            continue
        inline = re.match(r"\s*domain:\s*(\S+)", comment)
        entry = ManifestEntry(m.group(1), m.group(2), inline.group(1) if inline else domain, number)
        if entry.key.lower() not in seen:
            seen.add(entry.key.lower())
            entries.append(entry)
    return entries, bad


def license_from_metadata(meta: Any) -> tuple[str | None, str | None]:
    """(SPDX id or None, raw license text) from PKG-INFO headers."""
    expr = (meta.get("License-Expression") or "").strip()
    if expr and _SPDX_LIKE.match(expr):
        return expr, expr
    raw = (meta.get("License") or "").strip()
    for classifier in meta.get_all("Classifier") or []:
        if classifier.startswith("License :: OSI Approved :: "):
            name = classifier.removeprefix("License :: OSI Approved :: ")
            if name in CLASSIFIER_SPDX:
                return CLASSIFIER_SPDX[name], raw or name
    if raw and len(raw) <= 40 and _SPDX_LIKE.match(raw) and raw.upper() not in {"UNKNOWN", "NONE"}:
        return raw, raw
    return None, raw or None


def _normalise(name: str) -> str:
    """A project name under PEP 503 normalisation."""
    return re.sub(r"[-_.]+", "-", name).lower()


def read_pkg_info(archive: Path) -> str:
    """The top-level PKG-INFO of an sdist, read in memory (nothing is extracted to disk)."""
    name = archive.name
    if name.endswith((".tar.gz", ".tgz")):
        with tarfile.open(archive, "r:gz") as tar:
            members = [
                m
                for m in tar.getmembers()
                if m.isfile()
                and m.name.count("/") == 1
                and m.name.endswith("/PKG-INFO")
                and m.size <= _MAX_PKG_INFO
            ]
            if members:
                handle = tar.extractfile(members[0])
                if handle is not None:
                    return handle.read().decode("utf-8", "replace")
    elif name.endswith(".zip"):
        with zipfile.ZipFile(archive) as zf:
            for info in zf.infolist():
                if (
                    info.filename.count("/") == 1
                    and info.filename.endswith("/PKG-INFO")
                    and info.file_size <= _MAX_PKG_INFO
                ):
                    return zf.read(info).decode("utf-8", "replace")
    raise ValueError("no PKG-INFO at the top of the source distribution")


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class SampleSource:
    """PyPI source distributions listed in a manifest, each treated as one repository."""

    name = "sample"

    def __init__(self, settings: Settings, manifest: Path | None = None) -> None:
        self.settings = settings
        self.manifest = Path(manifest or settings.sample_manifest)
        self.cache_dir = settings.var_dir / "cache" / "sample"

    def entries(self, on_reject: RejectFn | None = None) -> list[ManifestEntry]:
        entries, bad = read_manifest(self.manifest)
        for number, text in bad:
            log.warning("sample manifest %s line %d is not name==version: %r", self.manifest, number, text)
            if on_reject:
                on_reject(f"{self.manifest.name}:{number}", "invalid_manifest_line", text[:200])
        return entries

    def download(self, entry: ManifestEntry) -> Path:
        """The cached sdist of ``entry``, downloaded with pip on first use."""
        folder = self.cache_dir / f"{entry.name.lower()}-{entry.version}"
        found = (
            [p for p in folder.glob("*") if p.name.endswith((".tar.gz", ".zip", ".tgz"))]
            if folder.is_dir()
            else []
        )
        if found:
            return found[0]
        tmp = folder.with_name(folder.name + ".part")
        tmp.mkdir(parents=True, exist_ok=True)
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--no-binary",
            ":all:",
            "--disable-pip-version-check",
            "-q",
            "-d",
            str(tmp),
            entry.key,
        ]
        try:
            proc = subprocess.run(
                cmd, capture_output=True, text=True, timeout=self.settings.sample_pip_timeout_s, check=False
            )
        except subprocess.TimeoutExpired:
            raise ValueError(f"pip download of {entry.key} timed out") from None
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.splitlines() if ln.strip() and "is ignored" not in ln]
            last = (lines or ["?"])[-1][:300]
            if "No matching distribution" in last:  # no such release, or wheels only (sdists are needed)
                last += " (no such package or version, or no source distribution of it: wheels are not used)"
            raise ValueError(f"pip download of {entry.key} failed: {last}")
        archives = [p for p in tmp.iterdir() if p.name.endswith((".tar.gz", ".zip", ".tgz"))]
        if not archives:
            raise ValueError(f"pip download of {entry.key} gave no .tar.gz or .zip sdist")
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / archives[0].name
        archives[0].replace(target)
        for leftover in tmp.iterdir():
            leftover.unlink()
        tmp.rmdir()
        return target

    def record_for(self, entry: ManifestEntry, archive: Path) -> RepositoryRecord:
        """The record of one sdist, from its PKG-INFO.  Every field is untrusted text: NUL bytes and
        undecodable bytes are replaced, long fields cut, and the name is the manifest's (a PKG-INFO
        ``Name`` that is not the same project under PEP 503 normalisation is ignored)."""
        meta = email.parser.Parser().parsestr(clean_text(read_pkg_info(archive)))
        spdx, raw_license = license_from_metadata(meta)
        classifiers = list(meta.get_all("Classifier") or [])
        topics = sorted(
            {
                c.split(" :: ")[-1].lower()
                for c in classifiers
                if c.startswith("Topic :: Scientific/Engineering")
            }
        )
        keywords = [k.strip().lower() for k in re.split(r"[,\s]+", meta.get("Keywords") or "") if k.strip()]
        urls = [u.split(",", 1)[-1].strip() for u in meta.get_all("Project-URL") or []]
        home = (meta.get("Home-page") or "").strip() or (urls[0] if urls else None)
        if home and home.upper() == "UNKNOWN":
            home = None
        claimed = str(meta.get("Name") or "").strip()
        same = _normalise(claimed) == _normalise(entry.name)
        if home and not home.startswith(("http://", "https://")):
            home = None
        return RepositoryRecord(
            source=self.name,
            source_id=entry.key,
            full_name=claimed if same else entry.name,
            url=(home[:2048] if home else None) or f"https://pypi.org/project/{entry.name}/{entry.version}/",
            description=str(meta.get("Summary") or "").strip()[:20_000] or None,
            stars=None,
            license=spdx[:128] if spdx else None,
            topics=sorted({t[:100] for t in topics + keywords[:20]}),
            language="Python",
            domain=entry.domain,
            extra={
                "version": entry.version,
                "classifiers": [c[:300] for c in classifiers[:200]],
                "license_text": (raw_license or "")[:500] or None,
                "sdist": archive.name,
                "sdist_sha256": sha256_file(archive),
                "metadata_version": meta.get("Metadata-Version"),
            },
        )

    def discover(
        self, shard: int = 0, num_shards: int = 1, limit: int | None = None, on_reject: RejectFn | None = None
    ) -> Iterator[RepositoryRecord]:
        """Records of this shard's manifest entries (first ``limit`` entries of the manifest)."""
        entries = self.entries(on_reject if shard == 0 else None)
        if limit is not None:
            entries = entries[:limit]
        mine = [e for e in entries if shard_of(e.key, num_shards) == shard]
        progress = Progress(f"sample source shard {shard + 1}/{num_shards}: packages", total=len(mine))
        for entry in mine:
            try:
                archive = self.download(entry)
                yield self.record_for(entry, archive)
            except (ValueError, OSError, EOFError, zlib.error, tarfile.TarError, zipfile.BadZipFile) as exc:
                log.warning("sample package %s skipped: %s", entry.key, exc)
                if on_reject:
                    reason = "download_failed" if "pip download" in str(exc) else "bad_sdist"
                    on_reject(entry.key, reason, str(exc))
            progress.advance()
        progress.finish()

    def fetch(self, repo: Any, workdir: Path) -> Any:
        """The sdist archive itself (cached); its sha256 is the pinned "commit"."""
        from scicodepile.sources import FetchedSnapshot

        name, _, version = str(repo.source_id).partition("==")
        entry = ManifestEntry(name, version, repo.domain, 0)
        archive = self.download(entry)
        kind = "zip" if archive.name.endswith(".zip") else "tar.gz"
        return FetchedSnapshot(commit=f"sha256:{sha256_file(archive)}", path=archive, kind=kind)
