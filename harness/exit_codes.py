"""The exit codes of every kchaos command (DESIGN.md, "The run", step 7)."""

from __future__ import annotations

from typing import Any

__all__ = ["ERROR", "INVALID", "UNKNOWN", "VALID", "for_verdict"]

VALID = 0
INVALID = 1
UNKNOWN = 2
ERROR = 3  # a harness error, or bad input (options, files)


def for_verdict(valid: Any) -> int:
    """0 for true, 1 for false, 2 for "unknown" (or anything else)."""
    if valid is True:
        return VALID
    if valid is False:
        return INVALID
    return UNKNOWN
