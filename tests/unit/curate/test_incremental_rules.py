"""The incremental rules of the curate stage that need no database: who wins a duplicate cluster,
how tombstones are matched, and how SQL LIKE prefixes are escaped."""

from __future__ import annotations

from scicodepile.curate.stage import _decide, _like, _tombstone_index


def rank(stars: dict[int, int]):
    return lambda d: (-stars[d], d)


def test_published_file_wins_over_better_ranked_new_files() -> None:
    clusters = {1: "c", 2: "c", 3: "c"}
    drops = _decide(
        clusters, new={2, 3}, published={1: "f1/s/run=a/part-00000.parquet"}, rank=rank({1: 1, 2: 99, 3: 50})
    )
    assert drops == {2: ("c", 1), 3: ("c", 1)}


def test_keep_rule_among_new_files_and_lone_files_untouched() -> None:
    clusters = {10: "x", 11: "x", 12: "y", 20: "z"}
    drops = _decide(clusters, new={10, 11, 12, 20}, published={}, rank=rank({10: 5, 11: 7, 12: 1, 20: 3}))
    assert drops == {10: ("x", 11)}


def test_cluster_of_published_files_only_is_left_alone() -> None:
    assert _decide({1: "c", 2: "c"}, new=set(), published={1: "k", 2: "k"}, rank=rank({1: 1, 2: 2})) == {}


def test_tombstones_match_shard_and_row_identity() -> None:
    dead = _tombstone_index(
        [
            {"shard_key": "f1/s/run=a/part-00000.parquet", "repository": "r", "commit": "c1", "path": "a.py"},
            {"shard_key": "f1/s/run=a/part-00001.parquet", "repository": "r", "commit": "c1", "path": "b.py"},
        ]
    )
    assert dead == {
        "f1/s/run=a/part-00000.parquet": {("r", "c1", "a.py")},
        "f1/s/run=a/part-00001.parquet": {("r", "c1", "b.py")},
    }


def test_like_prefix_escapes_wildcards() -> None:
    assert _like("f1/a_b%c/run=x\\y/") == "f1/a\\_b\\%c/run=x\\\\y/"
