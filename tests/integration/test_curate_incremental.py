"""Incremental curation on real Postgres: F1 grows run by run and never loses published data.

Run "a" curates four repositories; run "b" (another folder of the same local source) adds new ones,
among them an exact copy and a near copy of files "a" published and an exact pair inside "b".  Then run
"c" re-curates an updated repository of "a" and applies a new opt-out.  After every run: the F1
union (minus tombstones) equals the kept files of the database row for row, no sha256 appears twice,
"a"'s shards are byte-identical, and every dropped file names the file it lost to.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from sqlalchemy import select, update

from scicodepile.curate.stage import f1_run_prefix, f1_shard_keys, f1_slug, f1_tombstones, read_f1
from scicodepile.db import session_scope
from scicodepile.db.models import File, Rejection, Repository, Snapshot
from scicodepile.runner import RunContext
from scicodepile.store import open_store

pytestmark = pytest.mark.integration

MIT = "MIT License\n\nPermission is hereby granted, free of charge, to any person obtaining a copy\n"
README = """# {name}

A physics library implementing numerical solvers for quantum dynamics, with simulation and analysis tools.

## Usage

```python
import {name}
```
"""
WORDS = (
    "flux density grid mesh solver kernel lattice spectrum tensor field energy phase decay wave "
    "orbit photon gauge charge boson vortex stress strain heat entropy"
).split()


def program(seed: int, tweak: bool = False) -> str:
    """A Python module of its own for each seed; ``tweak`` changes one line (a near duplicate)."""
    rng = random.Random(seed)
    out = [f'"""Numerical kernels, family {seed}."""', "", "import math", ""]
    for i in range(10):
        name = f"{rng.choice(WORDS)}_{rng.choice(WORDS)}_{rng.randint(10, 99)}"
        a, b, c = (rng.randint(2, 997) for _ in range(3))
        if tweak and i == 4:
            a, b, c = a + 1, b + 1, c + 1
        fn = rng.choice(["sin", "cos", "exp", "sqrt", "log1p"])
        out += [
            f"def {name}({rng.choice(WORDS)}, {rng.choice(WORDS)}_b):",
            f'    """The {rng.choice(WORDS)} {rng.choice(WORDS)} term of order {i}."""',
            f"    return math.{fn}({a} * {i + 1}) + {b} / {c}",
            "",
        ]
    return "\n".join(out)


def make_repo(root: Path, name: str, files: dict[str, str], stars: int) -> None:
    folder = root / name
    for rel, text in {"README.md": README.format(name=name), "LICENSE": MIT, **files}.items():
        (folder / rel).parent.mkdir(parents=True, exist_ok=True)
        (folder / rel).write_text(text)
    (root / f"{name}.metadata.json").write_text(json.dumps({"stars": stars, "license": "MIT"}))


def curate(settings, folder: Path, run: str, **params: object):
    from scicodepile.crawl.stage import run_crawl_stage
    from scicodepile.curate.stage import run_curate_stage

    ctx = RunContext(
        settings=settings, source="local", path=folder, run=run, num_shards=2, params=dict(params)
    )
    run_crawl_stage(ctx)
    return run_curate_stage(ctx), ctx


def files_state(settings) -> dict[tuple[str, str, str], tuple]:
    """(repository, commit, path) -> (kept, reason, shard_key, dedup_cluster, sha256) of this test's files."""
    with session_scope(settings) as s:
        rows = s.execute(
            select(
                Repository.full_name,
                Snapshot.commit,
                File.path,
                File.kept,
                File.rejection_reason,
                File.shard_key,
                File.dedup_cluster,
                File.sha256,
            )
            .join(Repository, Repository.id == File.repository_id)
            .join(Snapshot, Snapshot.id == File.snapshot_id)
            .where(Repository.full_name.like("inc-%"))
        ).all()
    return {(r[0], r[1], r[2]): tuple(r[3:]) for r in rows}


def rejection(settings, subject_prefix: str, path: str, reason: str) -> str:
    with session_scope(settings) as s:
        details = s.scalars(
            select(Rejection.detail).where(
                Rejection.subject_type == "file",
                Rejection.reason == reason,
                Rejection.subject_key.like(f"{subject_prefix}@%:{path}"),
            )
        ).all()
    assert len(details) == 1, (subject_prefix, path, reason, details)
    return details[0]


def check_union(settings, store) -> dict:
    """F1 live rows == kept files of the database; no sha256 twice; provenance on every row."""
    live = read_f1(store, settings)
    state = files_state(settings)
    kept = {k: v for k, v in state.items() if v[0]}
    ids = list(zip(*(live.column(c).to_pylist() for c in ("repository", "commit", "path")), strict=True))
    assert sorted(ids) == sorted(kept), "F1 union (minus tombstones) != kept files"
    shas = live.column("sha256").to_pylist()
    assert len(shas) == len(set(shas)), "a sha256 appears twice in F1"
    assert all(v[2] and v[2].startswith(f"f1/{f1_slug(settings)}/run=") for v in kept.values())
    return kept


def snapshot_objects(store, prefix: str) -> dict[str, bytes]:
    return {o.key: store.get_bytes(o.key) for o in store.list(prefix)}


@pytest.fixture
def settings(pg_settings, tmp_path: Path):
    """``pg_settings`` on a Postgres database of this test's own: the session's database is shared, and
    the "local" repositories of this test would otherwise be due (and unfetchable) in other curate tests
    that use another F1 config."""
    from scicodepile.db import migrate
    from tests.support.services import postgres_database

    optout = tmp_path / "optout.txt"
    optout.write_text("# none yet\n")
    with postgres_database("scicodepile_incremental") as url:
        settings = pg_settings.model_copy(update={"database_url": url, "curate_optout_file": optout})
        migrate(settings)
        yield settings


def test_runs_append_to_f1_and_dedup_globally(settings, tmp_path: Path) -> None:
    import datasets

    store = open_store(settings)
    slug = f1_slug(settings)

    # ---- run a: four repositories, two files each
    folder_a = tmp_path / "a"
    for i in range(1, 5):
        make_repo(folder_a, f"inc-a{i}", {f"k{i}_{j}.py": program(100 * i + j) for j in (1, 2)}, stars=50 + i)
    report_a, ctx_a = curate(settings, folder_a, "a")
    assert report_a.details["gate"] == "passed" and report_a.kept == 8
    assert (
        report_a.details["dedup"]["exact_duplicates"] == 0
        and report_a.details["dedup"]["near_duplicates"] == 0
    )
    check_union(settings, store)
    shards_a = snapshot_objects(store, f1_run_prefix(ctx_a))
    assert shards_a and all(k.startswith(f"f1/{slug}/run=a/") for k in shards_a)

    # ---- run b: new repositories only (another folder of the same source)
    folder_b = tmp_path / "b"
    make_repo(folder_b, "inc-b1", {"copy.py": program(101), "b1.py": program(901)}, stars=500)
    make_repo(folder_b, "inc-b2", {"near.py": program(201, tweak=True), "b2.py": program(902)}, stars=500)
    make_repo(folder_b, "inc-b3", {"b3.py": program(903)}, stars=30)
    make_repo(folder_b, "inc-b4", {"shared.py": program(999), "b4.py": program(904)}, stars=80)
    make_repo(folder_b, "inc-b5", {"shared.py": program(999)}, stars=20)
    report_b, _ = curate(settings, folder_b, "b")
    d = report_b.details
    assert d["gate"] == "passed"
    assert d["repositories"]["input"] == 5, "run b curates only the new repositories"
    assert d["dedup"]["exact_duplicates"] == 2 and d["dedup"]["near_duplicates"] == 1
    assert report_b.kept == 8 - 3
    assert snapshot_objects(store, f1_run_prefix(ctx_a)) == shards_a, "run a's shards must not change"
    kept = check_union(settings, store)
    assert len(kept) == 8 + 5
    state = files_state(settings)
    by_path = {(r, p): v for (r, _, p), v in state.items()}
    # exact copy of a published file: the published one stays, even though b1 has more stars
    assert by_path[("inc-b1", "copy.py")][:2] == (False, "exact_duplicate")
    assert by_path[("inc-a1", "k1_1.py")][:2] == (True, None)
    detail = rejection(settings, "inc-b1", "copy.py", "exact_duplicate")
    assert (
        "inc-a1@" in detail and ":k1_1.py" in detail and "published in f1/" in detail and "/run=a/" in detail
    )
    # near copy of a published file
    assert by_path[("inc-b2", "near.py")][:2] == (False, "near_duplicate")
    detail = rejection(settings, "inc-b2", "near.py", "near_duplicate")
    assert "inc-a2@" in detail and ":k2_1.py" in detail and "published in f1/" in detail
    # a pair inside run b: the keep rule (more stars) decides
    assert by_path[("inc-b4", "shared.py")][0] is True
    assert by_path[("inc-b4", "shared.py")][3].startswith("exact-")
    assert by_path[("inc-b5", "shared.py")][:2] == (False, "exact_duplicate")
    detail = rejection(settings, "inc-b5", "shared.py", "exact_duplicate")
    assert "inc-b4@" in detail and "kept by this run" in detail

    # ---- rerunning b changes nothing: skipped by its markers, and recomputed with force
    f1_before = snapshot_objects(store, f"f1/{slug}/")
    with session_scope(settings) as s:
        rejections_before = s.execute(select(Rejection.subject_key, Rejection.reason, Rejection.detail)).all()
    again, _ = curate(settings, folder_b, "b")
    assert again.kept == report_b.kept and again.outputs == report_b.outputs
    forced, _ = curate(settings, folder_b, "b", force=True)
    assert forced.kept == report_b.kept and forced.details["dedup"] == report_b.details["dedup"]
    assert files_state(settings) == state
    f1_after = snapshot_objects(store, f"f1/{slug}/")
    assert f1_after.keys() == f1_before.keys()
    assert {k: v for k, v in f1_after.items() if k.endswith(".parquet")} == {
        k: v for k, v in f1_before.items() if k.endswith(".parquet")
    }
    with session_scope(settings) as s:
        rejections_after = s.execute(select(Rejection.subject_key, Rejection.reason, Rejection.detail)).all()
    assert sorted(rejections_after) == sorted(rejections_before)

    # ---- run c: inc-a3 was updated (one file changed), inc-a4 opted out
    (folder_a / "inc-a3" / "k3_1.py").write_text(program(777))
    settings.curate_optout_file.write_text("inc-a4\n")
    with session_scope(settings) as s:  # what the crawl does when pushed_at changes (local has none)
        s.execute(update(Repository).where(Repository.full_name == "inc-a3").values(needs_recurate=True))
    report_c, _ = curate(settings, folder_a, "c")
    assert report_c.details["gate"] == "passed"
    assert report_c.kept == 1  # only the changed file is new
    assert snapshot_objects(store, f1_run_prefix(ctx_a)) == shards_a, "run a's shards must not change"
    kept = check_union(settings, store)
    state = files_state(settings)
    a3 = {(c, p): v for (r, c, p), v in state.items() if r == "inc-a3"}
    commits = sorted({c for c, _ in a3})
    assert len(commits) == 2
    old, new = sorted(
        commits, key=lambda c: any(v[2] and "/run=c/" in v[2] for (cc, _), v in a3.items() if cc == c)
    )
    key_a3 = a3[(old, "k3_1.py")][2]
    assert a3[(old, "k3_1.py")][:3] == (False, "superseded", key_a3) and "/run=a/" in key_a3
    assert a3[(old, "k3_2.py")][:2] == (True, None), "an unchanged file stays published"
    assert a3[(new, "k3_2.py")][:2] == (False, "exact_duplicate")
    assert a3[(new, "k3_1.py")][0] is True and "/run=c/" in a3[(new, "k3_1.py")][2]
    detail = rejection(settings, "inc-a3", "k3_1.py", "superseded")
    assert f"replaced by inc-a3@{new}" in detail and "was published in" in detail
    a4 = {p: v for (r, _, p), v in state.items() if r == "inc-a4" and p.endswith(".py")}
    assert {p: v[:2] for p, v in a4.items()} == {
        "k4_1.py": (False, "withdrawn"),
        "k4_2.py": (False, "withdrawn"),
    }
    with session_scope(settings) as s:
        a4_repo = s.scalar(select(Repository).where(Repository.full_name == "inc-a4"))
        assert (a4_repo.status, a4_repo.rejection_reason) == ("rejected", "opted_out")
    tombs = f1_tombstones(store, settings)
    assert sorted((t["repository"], t["path"], t["reason"]) for t in tombs) == [
        ("inc-a3", "k3_1.py", "superseded"),
        ("inc-a4", "k4_1.py", "withdrawn"),
        ("inc-a4", "k4_2.py", "withdrawn"),
    ]
    assert all("/run=a/" in t["shard_key"] for t in tombs)
    assert len(kept) == 8 + 5 + 1 - 3

    # the union loads with datasets (every run's shards; readers drop the tombstoned rows)
    locations = [store.location(k) for k in f1_shard_keys(store, settings)]
    ds = datasets.load_dataset("parquet", data_files=locations, split="train", cache_dir=str(tmp_path / "hf"))
    assert len(ds) == len(kept) + len(tombs)
    assert set(ds.column_names) == {
        "content",
        "repository",
        "commit",
        "path",
        "language",
        "license",
        "sha256",
        "size",
        "domain",
        "dedup_cluster",
    }
