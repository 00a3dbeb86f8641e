"""Error types shared by every stage.

Configuration faults raise :class:`ConfigError` (one clear line naming the setting to fix); per-item
data faults are *recorded* as rejections, never raised.
"""

from __future__ import annotations


class SciCodePileError(Exception):
    """Base class of the platform's own errors."""


class ConfigError(SciCodePileError):
    """A configuration fault: a wrong URL, an unreachable service, a missing bucket.

    ``setting`` names the environment variable (or Airflow connection) the user must fix.
    """

    def __init__(self, message: str, *, setting: str | None = None) -> None:
        self.setting = setting
        super().__init__(message)

    def __str__(self) -> str:
        base = super().__str__()
        if self.setting and self.setting not in base:
            return f"{base} (check {self.setting})"
        return base


class StageNotAvailable(SciCodePileError):
    """A stage was asked for that this build does not have yet, or its inputs are missing."""


class QualityGateFailed(SciCodePileError):
    """A data-quality gate failed; the message names the failed expectations."""

    def __init__(self, stage: str, failures: list[str]) -> None:
        self.stage = stage
        self.failures = failures
        super().__init__(f"quality gate for {stage} failed: " + "; ".join(failures))
