"""Data-quality gates: great-expectations suites per stage, built when the task runs.

A failed gate raises :class:`scicodepile.errors.QualityGateFailed` naming every failed expectation,
which stops the downstream stage.
"""

from scicodepile.quality.f1 import f1_expectations, validate_f1
from scicodepile.quality.gates import ExpectationOutcome, GateResult, run_suite

__all__ = ["ExpectationOutcome", "GateResult", "f1_expectations", "run_suite", "validate_f1"]
