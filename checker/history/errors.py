"""Errors of the checker package.

    ValueError
     └── HistoryError    a history file (or op sequence) that is not a valid history
"""

from __future__ import annotations

__all__ = ["HistoryError"]


class HistoryError(ValueError):
    """A malformed history: where it is (path, 1-based line) and what is wrong."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(path, line, reason)
        self.path = str(path)
        self.line = line
        self.reason = reason

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"
