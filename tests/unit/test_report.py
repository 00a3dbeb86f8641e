"""The corpus report: filter levels with kept/rejected counts, and the dedup ratio."""

from __future__ import annotations

from scicodepile.db import migrate, record_rejection, session_scope, upsert
from scicodepile.db.models import File, Repository, Snapshot
from scicodepile.report import corpus_report, render_text


def test_filters_and_dedup_ratio(local_settings) -> None:
    migrate(local_settings)
    with session_scope(local_settings) as s:
        (repo_id,) = upsert(
            s, Repository, [{"source": "local", "source_id": "r", "full_name": "r", "status": "kept"}],
            keys=["source", "source_id"], returning=["id"],
        )[0]  # fmt: skip
        (snap_id,) = upsert(
            s, Snapshot, [{"repository_id": repo_id, "commit": "c1", "archive_key": "snapshots/1/c1.tar.gz"}],
            keys=["repository_id", "commit"], returning=["id"],
        )[0]  # fmt: skip
        rows = [
            {"snapshot_id": snap_id, "repository_id": repo_id, "path": f"f{i}.py", "sha256": f"{i:064d}",
             "language": "Python", "bytes": 10, "kept": i < 8}
            for i in range(10)
        ]  # fmt: skip
        upsert(s, File, rows, keys=["snapshot_id", "path"])
        record_rejection(s, "curate", "file", "r:f8.py", "exact_duplicate")
        record_rejection(s, "curate", "file", "r:f9.py", "near_duplicate")
        for i in range(3):
            record_rejection(s, "curate", "file", f"r:vendor/{i}.py", "vendored")
        record_rejection(s, "curate", "repository", "other", "license_not_permitted")
    report = corpus_report(local_settings)
    assert report.dedup == {"files_in": 10, "exact_duplicates": 1, "near_duplicates": 1, "dedup_ratio": 0.2}
    levels = {f["level"]: f for f in report.filters}
    assert levels["file"]["kept"] == 8
    assert levels["file"]["rejected"] == {"vendored": 3, "exact_duplicate": 1, "near_duplicate": 1}
    assert levels["repository"] == {
        "level": "repository",
        "kept": 1,
        "rejected": {"license_not_permitted": 1},
    }
    text = render_text(report)
    assert "dedup ratio 0.2000" in text and "kept 8; rejected: vendored 3" in text
