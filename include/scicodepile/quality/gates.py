"""Run a list of great-expectations expectations over a DataFrame in an ephemeral context.

Suites are plain lists of expectation objects built at run time (no great-expectations project
folder, no stored state), validated with great-expectations 1.x's batch API.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Any

from scicodepile.errors import QualityGateFailed

log = logging.getLogger("scicodepile")


@dataclass(frozen=True)
class ExpectationOutcome:
    """One expectation's result, small and JSON-able."""

    expectation: str
    kwargs: dict[str, Any]
    success: bool
    observed: Any = None

    def describe(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in sorted(self.kwargs.items()) if k != "batch_id")
        return f"{self.expectation}({args}) observed {self.observed!r}"


@dataclass
class GateResult:
    """All outcomes of one suite."""

    suite: str
    rows: int
    outcomes: list[ExpectationOutcome] = field(default_factory=list)

    @property
    def success(self) -> bool:
        return all(o.success for o in self.outcomes)

    @property
    def failures(self) -> list[str]:
        return [f"{self.suite}: {o.describe()}" for o in self.outcomes if not o.success]

    def to_dict(self) -> dict[str, Any]:
        return {
            "suite": self.suite,
            "rows": self.rows,
            "success": self.success,
            "expectations": [
                {"expectation": o.expectation, "success": o.success, "observed": _jsonable(o.observed)}
                for o in self.outcomes
            ],
        }


def _jsonable(value: Any) -> Any:
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    if isinstance(value, list | tuple):
        return [_jsonable(v) for v in value[:5]]
    return str(value)[:200]


def run_suite(name: str, frame: Any, expectations: list[Any]) -> GateResult:
    """Validate ``frame`` (a pandas DataFrame) against ``expectations``; never raises on failure."""
    os.environ.setdefault("GX_ANALYTICS_ENABLED", "False")
    import great_expectations as gx

    for noisy in ("great_expectations", "great_expectations.core"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    context = gx.get_context(mode="ephemeral")
    try:
        context.variables.progress_bars = {"globally": False, "metric_calculations": False}
    except Exception:  # noqa: S110 - cosmetic only; older/newer versions name this differently
        pass
    source = context.data_sources.add_pandas(f"{name}-source")
    asset = source.add_dataframe_asset(f"{name}-asset")
    batch = asset.add_batch_definition_whole_dataframe(f"{name}-batch").get_batch(
        batch_parameters={"dataframe": frame}
    )
    suite = gx.ExpectationSuite(name=name)
    for expectation in expectations:
        suite.add_expectation(expectation)
    result = batch.validate(suite, result_format="SUMMARY")
    gate = GateResult(suite=name, rows=len(frame))
    for r in result.results:
        info = r.result or {}
        observed = info.get("observed_value")
        if observed is None and "unexpected_count" in info:
            observed = {
                "unexpected_count": info.get("unexpected_count"),
                "examples": _jsonable(info.get("partial_unexpected_list", [])),
            }
        gate.outcomes.append(
            ExpectationOutcome(
                expectation=r.expectation_config.type,
                kwargs=dict(r.expectation_config.kwargs),
                success=bool(r.success),
                observed=observed,
            )
        )
    return gate


def enforce(stage: str, results: list[GateResult]) -> None:
    """Raise :class:`QualityGateFailed` naming every failed expectation of ``results``."""
    failures = [f for r in results for f in r.failures]
    if failures:
        raise QualityGateFailed(stage, failures)
