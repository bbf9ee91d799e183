"""The exit codes of every kchaos command (docs/architecture.md, "The run, end to end")."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from checker.core import merge_valid
from checker.lin.files import FileResult

__all__ = ["ERROR", "INCONCLUSIVE", "INVALID", "UNKNOWN", "VALID", "for_files", "for_state",
           "for_verdict", "worst"]

VALID = 0  # also a run whose anomalies the configuration allows
INVALID = 1
UNKNOWN = 2
ERROR = 3  # a harness error, or bad input (options, files)
INCONCLUSIVE = 4  # faults were asked and not one took effect
STATE_CODES = {"valid": VALID, "allowed": VALID, "invalid": INVALID, "unknown": UNKNOWN,
               "inconclusive": INCONCLUSIVE}


def for_verdict(valid: Any) -> int:
    """0 for true, 1 for false, 2 for "unknown" (or anything else)."""
    if valid is True:
        return VALID
    if valid is False:
        return INVALID
    return UNKNOWN


def for_state(state: str | None) -> int:
    """The code of a run's state (`reports.summary.run_state`); no state is unknown."""
    return STATE_CODES.get(state or "unknown", UNKNOWN)


def for_files(results: Iterable[FileResult]) -> int:
    """3 when any file could not be checked, else the merged verdict's code."""
    results = list(results)
    if any(result.error for result in results):
        return ERROR
    return for_verdict(merge_valid(result.valid for result in results))


def worst(codes: Iterable[int]) -> int:
    """The exit code of several checks: an error, else anomalies, else unknown, else
    inconclusive, else valid."""
    codes = set(codes)
    for code in (ERROR, INVALID, UNKNOWN, INCONCLUSIVE):
        if code in codes:
            return code
    return VALID
