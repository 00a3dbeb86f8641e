"""Date windows of search partitions, and recursive splitting of windows above GitHub's result cap.

GitHub returns at most 1,000 results per query.  A window whose ``total_count`` is larger is split
into sub-windows, each re-checked (and split again if needed) so nothing is silently lost.  Cut points
come from the created/pushed dates of the first page's items, a sample of the window's distribution:
cuts fall at the sample quantiles that give each piece about ``fill x cap`` results, which keeps pieces
full (few partial pages) and rarely over the cap.  Windows are half-open ``[start, end)`` with
one-second resolution (the search qualifier's).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

ONE_SECOND = timedelta(seconds=1)


def parse_instant(value: str | datetime) -> datetime:
    """An aware UTC datetime from an ISO string (``Z`` allowed) or a datetime; naive means UTC."""
    if isinstance(value, datetime):
        out = value
    else:
        text = str(value).strip().replace("Z", "+00:00")
        out = datetime.fromisoformat(text)
    if out.tzinfo is None:
        out = out.replace(tzinfo=UTC)
    return out.astimezone(UTC).replace(microsecond=0)


def _fmt(instant: datetime) -> str:
    return instant.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, order=True)
class Window:
    """A half-open time window ``[start, end)``."""

    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.end <= self.start:
            raise ValueError(f"empty window {self.start} .. {self.end}")

    @property
    def seconds(self) -> float:
        return (self.end - self.start).total_seconds()

    def qualifier(self, field: str) -> str:
        """``created:2020-01-01T00:00:00Z..2020-12-31T23:59:59Z`` (inclusive bounds on GitHub)."""
        return f"{field}:{_fmt(self.start)}..{_fmt(self.end - ONE_SECOND)}"

    def contains(self, instant: datetime) -> bool:
        return self.start <= instant < self.end


def split_window(
    window: Window, total: int, cap: int, fill: float, sample: list[datetime] | None = None
) -> list[Window]:
    """Sub-windows of ``window`` (which holds ``total`` > ``cap`` results) that cover it exactly.

    Returns ``[]`` when the window cannot be split (one second long).
    """
    if window.seconds <= 1:
        return []
    target = max(1.0, cap * fill)
    dates = sorted(d for d in (sample or []) if window.contains(d))
    cuts: list[datetime] = []
    if len(dates) >= 10 and total > 0:
        step = len(dates) * target / total  # sample ranks per piece
        rank = step
        while rank < len(dates):
            i = int(rank)
            lo, hi = dates[max(i - 1, 0)], dates[min(i, len(dates) - 1)]
            cut = lo + (hi - lo) / 2
            cuts.append(cut.replace(microsecond=0) + ONE_SECOND)
            rank += step
    if not cuts:
        pieces = max(2, math.ceil(total / target))
        span = window.end - window.start
        cuts = [window.start + span * i / pieces for i in range(1, pieces)]
    bounds = [window.start]
    for cut in sorted(c.replace(microsecond=0) for c in cuts):
        if bounds[-1] < cut < window.end:
            bounds.append(cut)
    if len(bounds) == 1:  # every cut collapsed: halve
        bounds.append((window.start + (window.end - window.start) / 2).replace(microsecond=0))
        if not window.start < bounds[-1] < window.end:
            return []
    bounds.append(window.end)
    return [Window(a, b) for a, b in itertools.pairwise(bounds)]


def intervals(start: datetime, end: datetime, step: timedelta) -> list[Window]:
    """Consecutive windows of length ``step`` covering ``[start, end)`` (the last may be shorter)."""
    out: list[Window] = []
    cursor = start
    while cursor < end:
        out.append(Window(cursor, min(cursor + step, end)))
        cursor += step
    return out
