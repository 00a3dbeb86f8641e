"""Safe extraction of hostile archives: every member extracted or rejected with a reason, nothing
written outside the extraction folder."""

from __future__ import annotations

import gzip
import io
import os
import stat
import tarfile
import zipfile
from pathlib import Path

import pytest

from scicodepile.curate.fetch import (
    ArchiveRejected,
    ExtractionLimits,
    check_member_name,
    extract_archive,
)


def snapshot_tree(root: Path) -> set[str]:
    """Every path under ``root`` (files, folders, links), relative."""
    out = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            out.add(str(Path(dirpath, name).relative_to(root)))
    return out


def add_bytes(tf: tarfile.TarFile, name: str, data: bytes, **attrs: object) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for k, v in attrs.items():
        setattr(info, k, v)
    tf.addfile(info, io.BytesIO(data))


def add_special(tf: tarfile.TarFile, name: str, kind: bytes, linkname: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = linkname
    tf.addfile(info)


@pytest.fixture
def sandbox(tmp_path: Path) -> tuple[Path, Path]:
    """(folder that must stay untouched except for dest, dest) — escapes would land in the parent."""
    outer = tmp_path / "outer"
    outer.mkdir()
    (outer / "victim.txt").write_text("original")
    return outer, outer / "dest"


def assert_accounted(result, members: list[str], prefix: str = "") -> None:
    """Nothing lost: every regular/link/special member is either extracted or rejected."""
    extracted = set(result.files)
    rejected = {name for name, _, _ in result.rejected}
    for m in members:
        safe, _ = check_member_name(m)
        rel = safe[len(prefix) :] if safe and prefix and safe.startswith(prefix) else (safe or m)
        assert rel in extracted or rel in rejected or m in rejected, f"{m} lost"


def test_hostile_tarball_every_member_accounted_and_nothing_escapes(sandbox, tmp_path: Path) -> None:
    outer, dest = sandbox
    archive = tmp_path / "evil.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        add_bytes(tf, "repo/src/ok.py", b"print('ok')\n")
        add_bytes(tf, "repo/../../victim.txt", b"pwned")  # traversal
        add_bytes(tf, "/etc/evil.py", b"pwned")  # absolute
        add_special(tf, "repo/link_out", tarfile.SYMTYPE, "../../victim.txt")  # symlink escape
        add_special(tf, "repo/link_in", tarfile.SYMTYPE, "src/ok.py")  # symlink inside
        add_special(tf, "repo/hard_out", tarfile.LNKTYPE, "../victim.txt")  # hard-link escape
        add_special(tf, "repo/hard_in", tarfile.LNKTYPE, "repo/src/ok.py")  # hard link inside
        add_special(tf, "repo/dev", tarfile.CHRTYPE)  # device
        add_special(tf, "repo/fifo", tarfile.FIFOTYPE)  # FIFO
        add_bytes(tf, "repo/.gitmodules", b"[submodule x]\n")
        add_bytes(tf, "repo/.git/config", b"[core]\n")
        add_bytes(tf, "repo/src/ok.py", b"print('again')\n")  # duplicate member
    before_outer = snapshot_tree(outer)
    result = extract_archive(archive, "tar.gz", dest)

    reasons = {name: reason for name, reason, _ in result.rejected}
    assert result.files == ["src/ok.py"]
    assert (result.root / "src/ok.py").read_text() == "print('ok')\n"
    assert reasons["repo/../../victim.txt"] == "path_traversal"
    assert reasons["/etc/evil.py"] == "absolute_path"
    assert reasons["link_out"] == "symlink_escape"
    assert reasons["link_in"] == "symlink"
    assert reasons["hard_out"] == "hardlink_escape"
    assert reasons["hard_in"] == "hardlink"
    assert reasons["dev"] == "special_file" and reasons["fifo"] == "special_file"
    assert reasons[".gitmodules"] == "submodule"
    assert reasons[".git/config"] == "vcs_metadata"
    assert [r for n, r, _ in result.rejected if n == "src/ok.py"] == ["duplicate_member"]
    # nothing outside dest changed; no links at all inside dest
    assert (outer / "victim.txt").read_text() == "original"
    assert snapshot_tree(outer) - {p for p in snapshot_tree(outer) if p.startswith("dest")} == before_outer
    for p in dest.rglob("*"):
        assert not p.is_symlink()
        assert p.resolve().is_relative_to(dest.resolve())
        assert p.is_dir() or p.stat().st_nlink == 1


def test_zip_with_traversal_symlink_and_absolute_path(sandbox, tmp_path: Path) -> None:
    outer, dest = sandbox
    archive = tmp_path / "evil.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        zf.writestr("pkg/mod.py", "x = 1\n")
        zf.writestr("../escape.py", "pwned")
        zf.writestr("..\\windows_escape.py", "pwned")
        zf.writestr("/abs.py", "pwned")
        link = zipfile.ZipInfo("pkg/link")
        link.external_attr = (stat.S_IFLNK | 0o777) << 16
        zf.writestr(link, "../../victim.txt")
    result = extract_archive(archive, "zip", dest)
    reasons = {name: reason for name, reason, _ in result.rejected}
    assert result.files == ["mod.py"] or result.files == ["pkg/mod.py"]
    assert reasons["../escape.py"] == "path_traversal"
    assert reasons["..\\windows_escape.py"] == "path_traversal"
    assert reasons["/abs.py"] == "absolute_path"
    assert any(r == "symlink_escape" for r in reasons.values())
    assert (outer / "victim.txt").read_text() == "original"
    assert not (outer / "escape.py").exists() and not (tmp_path / "escape.py").exists()
    assert_accounted(result, ["pkg/mod.py", "../escape.py", "/abs.py"], result.prefix)


def test_compression_bomb_is_refused_before_it_is_written(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.tar.gz"
    zeros = tmp_path / "zeros.bin"
    with open(zeros, "wb") as fh:
        fh.truncate(64 << 20)  # 64 MiB of zeros (sparse on disk): about 64 KiB once gzipped
    with tarfile.open(archive, "w:gz", compresslevel=9) as tf:
        tf.add(zeros, arcname="bomb/zeros.bin")
        add_bytes(tf, "bomb/after.py", b"x = 1\n")
    zeros.unlink()
    assert archive.stat().st_size < 1 << 20
    dest = tmp_path / "dest"
    limits = ExtractionLimits(max_total_bytes=1 << 30, max_files=100, max_ratio=100.0, max_file_bytes=1 << 30)
    with pytest.raises(ArchiveRejected) as err:
        extract_archive(archive, "tar.gz", dest, limits)
    assert err.value.reason == "compression_ratio"
    assert sum(p.stat().st_size for p in dest.rglob("*") if p.is_file()) == 0


def test_zip_bomb_per_file_cap_and_total_cap(tmp_path: Path) -> None:
    archive = tmp_path / "bomb.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("big.bin", b"\0" * (4 << 20))
        zf.writestr("small.py", "x = 1\n")
    result = extract_archive(
        archive,
        "zip",
        tmp_path / "a",
        ExtractionLimits(max_total_bytes=1 << 30, max_ratio=1e9, max_file_bytes=1 << 20),
    )
    assert result.files == ["small.py"]
    assert ("big.bin", "file_too_large") in [(n, r) for n, r, _ in result.rejected]
    with pytest.raises(ArchiveRejected) as err:
        extract_archive(
            archive,
            "zip",
            tmp_path / "b",
            ExtractionLimits(max_total_bytes=1 << 20, max_ratio=1e9, max_file_bytes=1 << 30),
        )
    assert err.value.reason == "archive_too_large"


def test_ten_thousand_file_tarball(tmp_path: Path) -> None:
    archive = tmp_path / "many.tar"
    with tarfile.open(archive, "w") as tf:
        for i in range(10_000):
            add_bytes(tf, f"many/d{i % 50}/f{i}.py", f"x = {i}\n".encode())
    result = extract_archive(archive, "tar", tmp_path / "ok")
    assert len(result.files) == 10_000 and not result.rejected and result.prefix == "many/"
    assert len([p for p in (tmp_path / "ok").rglob("*.py")]) == 10_000
    with pytest.raises(ArchiveRejected) as err:
        extract_archive(archive, "tar", tmp_path / "capped", ExtractionLimits(max_files=5_000))
    assert err.value.reason == "too_many_files"


def test_corrupt_archive_is_rejected_clearly(tmp_path: Path) -> None:
    bad = tmp_path / "bad.tar.gz"
    bad.write_bytes(gzip.compress(b"this is not a tar file" * 100)[:50])
    with pytest.raises(ArchiveRejected) as err:
        extract_archive(bad, "tar.gz", tmp_path / "d")
    assert err.value.reason == "unreadable_archive"


def test_folder_copy_never_follows_links(tmp_path: Path) -> None:
    src = tmp_path / "repo"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "a.py").write_text("a = 1\n")
    (src / ".git").mkdir()
    (src / ".git" / "HEAD").write_text("ref")
    secret = tmp_path / "secret.txt"
    secret.write_text("secret")
    (src / "pkg" / "leak.py").symlink_to(secret)
    (src / "pkg" / "inner.py").symlink_to(src / "pkg" / "a.py")
    os.mkfifo(src / "pipe")
    result = extract_archive(src, "dir", tmp_path / "copy")
    reasons = {n: r for n, r, _ in result.rejected}
    assert result.files == ["pkg/a.py"]
    assert reasons["pkg/leak.py"] == "symlink_escape"
    assert reasons["pipe"] == "special_file"
    assert reasons[".git"] == "vcs_metadata"
    assert reasons["pkg/inner.py"] in ("symlink", "symlink_escape")  # absolute target: treated as escape
    assert not any(p.is_symlink() for p in (tmp_path / "copy").rglob("*"))


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("../x", "path_traversal"),
        ("a/../../x", "path_traversal"),
        ("/x", "absolute_path"),
        ("C:/x", "absolute_path"),
        ("a\x00b", "path_traversal"),
        ("a/./b", None),
        ("./", "empty_name"),
    ],
)
def test_member_names(name: str, reason: str | None) -> None:
    safe, why = check_member_name(name)
    assert why == reason
    assert (safe is None) == (reason is not None)
