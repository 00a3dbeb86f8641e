"""The step shape every stage follows, partitions, reports and completion markers.

A :class:`Step` takes records and yields records; a :class:`Filter` answers ``keep, reason`` per
record and the base counts drops by reason (and hands rejected records to ``on_reject`` so they can be
recorded).  A stage function has the signature ``run_<stage>(partition, settings) -> StageReport``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
from abc import ABC, abstractmethod
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from scicodepile.store.base import ObjectStore
from scicodepile.store.keys import done_marker

log = logging.getLogger("scicodepile")

T = TypeVar("T")

STAGES = ("crawl", "curate", "annotate", "benchmark", "evaluate")
"""The pipeline's stages, in order."""


def shard_of(key: str | int, num_shards: int) -> int:
    """Stable shard of a natural key (same answer in every process, unlike ``hash``)."""
    digest = hashlib.blake2b(str(key).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % num_shards


@dataclass(frozen=True)
class Partition:
    """A coarse unit of work: shard ``index`` of ``count`` of a stage, within a run key."""

    stage: str
    index: int = 0
    count: int = 1
    run: str = "default"

    def __post_init__(self) -> None:
        if not 0 <= self.index < self.count:
            raise ValueError(f"partition index {self.index} outside 0..{self.count - 1}")

    @property
    def name(self) -> str:
        return f"{self.index:05d}-of-{self.count:05d}"

    def owns(self, key: str | int) -> bool:
        return shard_of(key, self.count) == self.index

    @classmethod
    def all(cls, stage: str, count: int, run: str = "default") -> list[Partition]:
        return [cls(stage, i, count, run) for i in range(count)]

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.stage, "index": self.index, "count": self.count, "run": self.run}


@dataclass
class StageReport:
    """What a stage (or one partition of it) did: small enough to pass through XCom."""

    stage: str
    kept: int = 0
    rejected: Counter[str] = field(default_factory=Counter)
    outputs: list[str] = field(default_factory=list)
    seconds: float = 0.0
    details: dict[str, Any] = field(default_factory=dict)
    skipped: bool = False

    def reject(self, reason: str, n: int = 1) -> None:
        self.rejected[reason] += n

    def merge(self, other: StageReport) -> StageReport:
        self.kept += other.kept
        self.rejected.update(other.rejected)
        self.outputs.extend(o for o in other.outputs if o not in self.outputs)
        self.seconds += other.seconds
        for k, v in other.details.items():
            if isinstance(v, int | float) and isinstance(self.details.get(k), int | float):
                self.details[k] += v
            elif isinstance(v, dict) and isinstance(self.details.get(k), dict):
                merged = dict(self.details[k])
                for kk, vv in v.items():
                    merged[kk] = merged.get(kk, 0) + vv if isinstance(vv, int | float) else vv
                self.details[k] = merged
            else:
                self.details.setdefault(k, v)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "kept": self.kept,
            "rejected": dict(sorted(self.rejected.items())),
            "outputs": list(self.outputs),
            "seconds": round(self.seconds, 3),
            **({"details": self.details} if self.details else {}),
            **({"skipped": True} if self.skipped else {}),
        }

    @classmethod
    def from_dict(cls, stage: str, data: dict[str, Any]) -> StageReport:
        return cls(
            stage=stage,
            kept=int(data.get("kept", 0)),
            rejected=Counter(data.get("rejected", {})),
            outputs=list(data.get("outputs", [])),
            seconds=float(data.get("seconds", 0.0)),
            details=dict(data.get("details", {})),
            skipped=bool(data.get("skipped", False)),
        )


def format_details(details: dict[str, Any], indent: str = "  ", width: int = 100) -> list[str]:
    """Human-readable lines for a report's details: nested dicts become indented ``k=v`` lists."""
    lines: list[str] = []

    def flat(value: Any) -> str:
        if isinstance(value, dict):
            return ", ".join(f"{k}={flat(v)}" for k, v in value.items()) or "-"
        if isinstance(value, float):
            return f"{value:.4g}"
        if isinstance(value, list):
            return ", ".join(map(str, value)) or "-"
        return str(value)

    for key, value in details.items():
        if isinstance(value, dict) and any(isinstance(v, dict) for v in value.values()):
            lines.append(f"{indent}{key}:")
            for sub, subvalue in value.items():
                lines.append(f"{indent}  {sub}: {flat(subvalue)}"[: width + 40])
        else:
            lines.append(f"{indent}{key}: {flat(value)}"[: width + 40])
    return lines


class Step(ABC, Generic[T]):
    """A pipeline step: records in, records out, with counters by reason."""

    name: str = "step"

    def __init__(self) -> None:
        self.stats: Counter[str] = Counter()

    @abstractmethod
    def run(self, records: Iterable[T], shard: int = 0, num_shards: int = 1) -> Iterator[T]:
        """Yield the records of ``shard`` that this step passes on (possibly transformed)."""


@dataclass(frozen=True)
class Verdict:
    keep: bool
    reason: str | None = None
    detail: str | None = None

    @classmethod
    def ok(cls) -> Verdict:
        return cls(True)

    @classmethod
    def drop(cls, reason: str, detail: str | None = None) -> Verdict:
        return cls(False, reason, detail)


class Filter(Step[T]):
    """A filter answers :class:`Verdict` per record; the base counts and reports the drops."""

    def __init__(self, on_reject: Callable[[T, Verdict], None] | None = None) -> None:
        super().__init__()
        self.on_reject = on_reject

    @abstractmethod
    def filter(self, record: T) -> Verdict: ...

    def run(self, records: Iterable[T], shard: int = 0, num_shards: int = 1) -> Iterator[T]:
        for record in records:
            verdict = self.filter(record)
            if verdict.keep:
                self.stats["kept"] += 1
                yield record
            else:
                self.stats[f"dropped:{verdict.reason}"] += 1
                if self.on_reject is not None:
                    self.on_reject(record, verdict)


# ---------------------------------------------------------------------------- completion markers
def is_done(store: ObjectStore, partition: Partition) -> StageReport | None:
    """The report saved by a completed partition, or None when it must (re)run."""
    key = done_marker(partition.stage, partition.run, partition.name)
    if not store.exists(key):
        return None
    report = StageReport.from_dict(partition.stage, json.loads(store.get_bytes(key)))
    report.skipped = True
    return report


def mark_done(store: ObjectStore, partition: Partition, report: StageReport) -> str:
    key = done_marker(partition.stage, partition.run, partition.name)
    store.put_bytes(key, json.dumps(report.to_dict(), default=str).encode(), "application/json")
    return key


def run_partition(
    store: ObjectStore, partition: Partition, work: Callable[[], StageReport], *, force: bool = False
) -> StageReport:
    """Run ``work`` for ``partition`` unless a completion marker says it already ran."""
    if not force and (done := is_done(store, partition)) is not None:
        log.info("%s %s already complete; skipping", partition.stage, partition.name)
        return done
    start = time.monotonic()
    report = work()
    report.seconds = report.seconds or (time.monotonic() - start)
    mark_done(store, partition, report)
    return report


class Progress:
    """Logs ``done/total`` at most every ``every`` seconds: long work shows it is alive."""

    def __init__(self, what: str, total: int | None = None, every: float = 5.0) -> None:
        self.what, self.total, self.every = what, total, every
        self.done = 0
        self._start = self._last = time.monotonic()

    def advance(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if now - self._last >= self.every:
            self._last = now
            self._log(now)

    def finish(self) -> None:
        self._log(time.monotonic())

    def _log(self, now: float) -> None:
        rate = self.done / max(now - self._start, 1e-9)
        of = f"/{self.total}" if self.total is not None else ""
        log.info("%s: %d%s done (%.1f/s)", self.what, self.done, of, rate)
