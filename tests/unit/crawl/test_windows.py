from __future__ import annotations

import itertools
import random
from datetime import UTC, datetime, timedelta

from scicodepile.crawl.windows import Window, intervals, parse_instant, split_window


def _covers_exactly(parent: Window, pieces: list[Window]) -> bool:
    return (
        pieces[0].start == parent.start
        and pieces[-1].end == parent.end
        and all(a.end == b.start for a, b in itertools.pairwise(pieces))
    )


def test_qualifier_is_inclusive_of_the_last_second() -> None:
    w = Window(parse_instant("2020-01-01"), parse_instant("2021-01-01T00:00:00Z"))
    assert w.qualifier("created") == "created:2020-01-01T00:00:00Z..2020-12-31T23:59:59Z"
    assert parse_instant("2020-01-01T01:00:00+01:00") == datetime(2020, 1, 1, tzinfo=UTC)


def test_split_uses_sample_quantiles_so_pieces_stay_under_the_cap() -> None:
    rng = random.Random(4)
    parent = Window(datetime(2010, 1, 1, tzinfo=UTC), datetime(2026, 1, 1, tzinfo=UTC))
    span = (parent.end - parent.start).total_seconds()
    population = sorted(
        parent.start + timedelta(seconds=int(span * rng.random() ** 0.4)) for _ in range(3500)
    )
    sample = rng.sample(population, 100)
    pieces = split_window(parent, len(population), 1000, 0.85, sample)
    assert _covers_exactly(parent, pieces)
    counts = [sum(p.contains(d) for d in population) for p in pieces]
    assert sum(counts) == len(population)  # nothing lost, nothing counted twice
    assert len(pieces) >= 4  # 3,500 results need at least four windows under the cap
    assert sum(c > 1000 for c in counts) <= 1  # rarely over: such a piece is split again


def test_split_without_a_sample_halves_or_more_and_one_second_is_unsplittable() -> None:
    parent = Window(datetime(2020, 1, 1, tzinfo=UTC), datetime(2020, 1, 2, tzinfo=UTC))
    pieces = split_window(parent, 2500, 1000, 0.85, [])
    assert len(pieces) == 3 and _covers_exactly(parent, pieces)
    tiny = Window(parent.start, parent.start + timedelta(seconds=1))
    assert split_window(tiny, 5000, 1000, 0.85, [parent.start] * 50) == []
    two = Window(parent.start, parent.start + timedelta(seconds=2))
    assert [p.seconds for p in split_window(two, 5000, 1000, 0.85, [])] == [1, 1]


def test_consecutive_intervals_are_disjoint_and_cover() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    parts = intervals(start, start + timedelta(days=3, hours=5), timedelta(days=1))
    assert len(parts) == 4 and _covers_exactly(Window(start, parts[-1].end), parts)
