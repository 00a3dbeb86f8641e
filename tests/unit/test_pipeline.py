from __future__ import annotations

from collections import Counter

import pytest

from scicodepile.pipeline import Filter, Partition, StageReport, Verdict, run_partition, shard_of
from scicodepile.store import LocalObjectStore


class EvenFilter(Filter[int]):
    def filter(self, record: int) -> Verdict:
        return Verdict.ok() if record % 2 == 0 else Verdict.drop("odd")


def test_filter_counts_drops_by_reason_and_reports_rejects() -> None:
    rejected: list[tuple[int, str]] = []
    f = EvenFilter(on_reject=lambda r, v: rejected.append((r, v.reason)))
    assert list(f.run(range(7))) == [0, 2, 4, 6]
    assert f.stats == Counter({"kept": 4, "dropped:odd": 3})
    assert rejected == [(1, "odd"), (3, "odd"), (5, "odd")]


def test_shards_are_stable_and_cover_everything() -> None:
    keys = [f"repo-{i}" for i in range(1000)]
    parts = Partition.all("curate", 7)
    owners = [[p.index for p in parts if p.owns(k)] for k in keys]
    assert all(len(o) == 1 for o in owners)
    assert shard_of("repo-1", 7) == shard_of("repo-1", 7)
    with pytest.raises(ValueError):
        Partition("x", 3, 3)


def test_completed_partition_is_skipped_on_rerun(tmp_path) -> None:
    store = LocalObjectStore(tmp_path)
    calls = []

    def work() -> StageReport:
        calls.append(1)
        r = StageReport("curate", kept=5)
        r.reject("too_small", 2)
        return r

    p = Partition("curate", 0, 2, run="r1")
    first = run_partition(store, p, work)
    second = run_partition(store, p, work)
    assert len(calls) == 1 and second.skipped and second.kept == 5 and second.rejected == {"too_small": 2}
    assert not first.skipped
    run_partition(store, p, work, force=True)
    assert len(calls) == 2


def test_report_merge() -> None:
    a = StageReport("s", kept=1, rejected=Counter(x=1), outputs=["k1"], details={"bytes": 10})
    b = StageReport("s", kept=2, rejected=Counter(x=2, y=1), outputs=["k1", "k2"], details={"bytes": 5})
    a.merge(b)
    assert a.to_dict()["rejected"] == {"x": 3, "y": 1} and a.kept == 3
    assert a.outputs == ["k1", "k2"] and a.details["bytes"] == 15
