"""Run stages in order without Airflow: the code path shared by the CLI and the DAGs.

Each stage is registered by a dotted path ``module:function`` taking a :class:`RunContext` and
returning a :class:`StageReport`; modules are imported lazily, so a stage that has not landed yet
gives a clear :class:`StageNotAvailable` instead of an ImportError at start-up.
"""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scicodepile.errors import StageNotAvailable
from scicodepile.pipeline import STAGES, StageReport
from scicodepile.settings import Settings

log = logging.getLogger("scicodepile")

SOURCES = ("sample", "local", "github")

STAGE_FUNCTIONS: dict[str, str] = {
    "crawl": "scicodepile.crawl.stage:run_crawl_stage",
    "curate": "scicodepile.curate.stage:run_curate_stage",
    "annotate": "scicodepile.annotate.stage:run_annotate_stage",
    "benchmark": "scicodepile.benchmark.stage:run_benchmark_stage",
    "evaluate": "scicodepile.evaluate.stage:run_evaluate_stage",
}


@dataclass
class RunContext:
    """Everything a stage needs besides its partition: settings, source, limits, run key."""

    settings: Settings
    source: str = "sample"
    path: Path | None = None
    manifest: Path | None = None
    limit: int | None = None
    run: str = "default"
    num_shards: int = 1
    params: dict[str, Any] = field(default_factory=dict)


def stage_function(stage: str) -> Callable[[RunContext], StageReport]:
    if stage not in STAGE_FUNCTIONS:
        raise StageNotAvailable(f"unknown stage {stage!r}; stages are {', '.join(STAGES)}")
    module_name, func_name = STAGE_FUNCTIONS[stage].split(":")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name and (exc.name == module_name or module_name.startswith(exc.name + ".")):
            raise StageNotAvailable(f"stage {stage!r} is not available in this build yet") from None
        raise
    return getattr(module, func_name)


def run_until(ctx: RunContext, until: str) -> dict[str, StageReport]:
    """Run every stage from the first up to and including ``until``."""
    if until not in STAGES:
        raise StageNotAvailable(f"unknown stage {until!r}; stages are {', '.join(STAGES)}")
    wanted = STAGES[: STAGES.index(until) + 1]
    functions = {stage: stage_function(stage) for stage in wanted}  # fail before any work
    reports: dict[str, StageReport] = {}
    for stage, func in functions.items():
        log.info("stage %s: starting", stage)
        start = time.monotonic()
        report = func(ctx)
        report.seconds = time.monotonic() - start
        reports[stage] = report
        log.info(
            "stage %s: kept %d, rejected %d in %.1fs",
            stage,
            report.kept,
            sum(report.rejected.values()),
            report.seconds,
        )
    return reports
