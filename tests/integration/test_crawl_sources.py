"""The offline sources: "sample" (real PyPI sdists via pip) and "local" (a folder of repositories)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest
from sqlalchemy import select

from scicodepile.db import migrate, session_scope
from scicodepile.db.models import Rejection, Repository
from scicodepile.runner import RunContext
from scicodepile.settings import DATA_DIR, REPO_ROOT, Settings
from scicodepile.sources import get_source
from scicodepile.sources.sample import read_manifest

pytestmark = pytest.mark.integration


def test_shipped_manifest_is_about_40_pinned_packages_over_five_domains() -> None:
    entries, bad = read_manifest(DATA_DIR / "sample_manifest.txt")
    assert not bad and 35 <= len(entries) <= 45
    assert {e.domain for e in entries} == {
        "chemistry",
        "life-sciences",
        "pharmaceutics",
        "numerical-methods",
        "ai-modelling",
    }


def test_sample_source_end_to_end_through_the_cli(tmp_path: Path) -> None:
    manifest = tmp_path / "manifest.txt"
    manifest.write_text(
        "# two tiny real packages\n"
        "chemparse==0.3.2   # domain: chemistry\n"
        "# domain: numerical-methods\n"
        "odeintw==1.0.2\n"
        "not a requirement line\n"
        "chemparse==999.0.0  # a version that does not exist\n"
    )
    out = tmp_path / "out"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SCICODEPILE_")}
    env["PYTHONPATH"] = str(REPO_ROOT / "include")
    cmd = [
        sys.executable,
        "-m",
        "scicodepile.cli",
        "-q",
        "run",
        "--source",
        "sample",
        "--manifest",
        str(manifest),
        "--until",
        "crawl",
        "--out",
        str(out),
        "--json",
    ]
    proc = subprocess.run(cmd, env=env, cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    crawl = json.loads(proc.stdout.strip().splitlines()[-1])["stages"]["crawl"]
    assert crawl["kept"] == 2
    assert crawl["rejected"] == {"download_failed": 1, "invalid_manifest_line": 1}

    from scicodepile.settings import load_settings

    settings = load_settings(var_dir=out)
    with session_scope(settings) as s:
        repos = {r.source_id: r for r in s.scalars(select(Repository))}
        reasons = {(r.subject_key, r.reason) for r in s.scalars(select(Rejection))}
    assert set(repos) == {"chemparse==0.3.2", "odeintw==1.0.2"}
    chem, ode = repos["chemparse==0.3.2"], repos["odeintw==1.0.2"]
    assert chem.stars is None and ode.stars is None  # unknown, never invented
    assert chem.domain == "chemistry" and ode.domain == "numerical-methods"
    assert chem.description and "formula" in chem.description.lower()
    assert chem.license == "MIT"
    assert chem.extra["sdist_sha256"] and chem.extra["classifiers"]
    assert ("chemparse==999.0.0", "download_failed") in reasons
    assert ("manifest.txt:5", "invalid_manifest_line") in reasons

    # the snapshot is the cached sdist; a second run reuses the cache (no new download)
    cached = sorted((out / "cache" / "sample").glob("*/*.tar.gz"))
    assert [p.parent.name for p in cached] == ["chemparse-0.3.2", "odeintw-1.0.2"]
    mtimes = [p.stat().st_mtime_ns for p in cached]
    ctx = RunContext(settings=settings, source="sample", manifest=manifest)
    snap = get_source("sample", ctx).fetch(chem, tmp_path / "work")
    assert snap.kind == "tar.gz" and snap.commit == f"sha256:{chem.extra['sdist_sha256']}"
    assert [p.stat().st_mtime_ns for p in cached] == mtimes


def _git(folder: Path, *args: str) -> None:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.org",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.org",
    }
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True, env=env)


def test_local_source_folders_git_archives_and_metadata(local_settings: Settings, tmp_path: Path) -> None:
    root = tmp_path / "mirror"
    (root / "plain").mkdir(parents=True)
    (root / "plain" / "solver.py").write_text("def f(x):\n    return x\n")
    repo = root / "gitrepo"
    repo.mkdir()
    (repo / "model.py").write_text("print('hi')\n")
    _git(repo, "init", "-q")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "first")
    with tarfile.open(root / "packed.tar.gz", "w:gz") as tar:
        tar.add(root / "plain" / "solver.py", arcname="packed/solver.py")
    with zipfile.ZipFile(root / "zipped.zip", "w") as zf:
        zf.writestr("zipped/a.py", "x = 1\n")
    (root / "plain.metadata.json").write_text(
        json.dumps(
            {
                "stars": 42,
                "license": "MIT",
                "topics": ["chemistry"],
                "description": "a solver",
                "domain": "chemistry",
            }
        )
    )
    (root / "zipped.metadata.json").write_text(json.dumps({"stars": "many"}))  # wrong type
    (root / "notes.txt").write_text("not a repository")

    migrate(local_settings)
    ctx = RunContext(settings=local_settings, source="local", path=root)
    from scicodepile.crawl.stage import run_crawl_stage

    report = run_crawl_stage(ctx)
    assert report.kept == 4
    assert report.rejected == {"invalid_metadata": 1}
    with session_scope(local_settings) as s:
        repos = {r.source_id: r for r in s.scalars(select(Repository))}
    assert set(repos) == {"plain", "gitrepo", "packed", "zipped"}
    assert (repos["plain"].stars, repos["plain"].license, repos["plain"].topics) == (42, "MIT", ["chemistry"])
    assert repos["zipped"].stars is None  # bad metadata is dropped, the repository is kept

    source = get_source("local", ctx)
    snaps = {name: source.fetch(repos[name], tmp_path / "work") for name in repos}
    assert snaps["gitrepo"].kind == "tar.gz" and len(snaps["gitrepo"].commit) == 40
    assert snaps["plain"].kind == "dir" and snaps["plain"].commit.startswith("tree:")
    assert snaps["packed"].kind == "tar.gz" and snaps["zipped"].kind == "zip"
    # a rerun is idempotent
    run_crawl_stage(ctx)
    with session_scope(local_settings) as s:
        assert len(s.scalars(select(Repository)).all()) == 4
