"""The checker protocol, results, and Jepsen's composition of checkers.

A checker is anything with `check(test, history, opts) -> Result`. An
`AnalysisChecker` (queue, acks, elections) judges the folded queue analysis
instead, with `check_analysis(test, analysis, opts)`, so `checker.spark` can
compute that analysis once, on executors, for all of them. `compose` runs
several under names and merges their verdicts with `merge_valid` (false beats
"unknown" beats true), the one verdict merge of the package; `check_safe` and
`check_analysis_safe` turn a crash into an "unknown" result that carries the
error. A Result serialises to the shape of DESIGN.md, "Checker results".
"""

from __future__ import annotations

import contextlib
import time
import traceback
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

from checker.history import Op

if TYPE_CHECKING:
    from checker.queue import QueueAnalysis

__all__ = [
    "AnalysisChecker",
    "Anomaly",
    "Checker",
    "Composed",
    "Result",
    "Verdict",
    "check_analysis_safe",
    "check_safe",
    "compose",
    "compose_results",
    "condense",
    "merge_valid",
]

Verdict = bool | Literal["unknown"]

CONDENSE_LIMIT = 32
CONDENSE_KEEP = 8


@dataclass
class Anomaly:
    """How many times one anomaly type occurred, and a few witnesses (JSON objects)."""

    count: int
    examples: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        return {"count": self.count, "examples": self.examples}


@dataclass
class Result:
    """One checker's answer. `allowed` lists anomaly types found but tolerated by the test."""

    valid: Verdict
    anomalies: dict[str, Anomaly] = field(default_factory=dict)
    stats: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    allowed: list[str] = field(default_factory=list)
    error: str | None = None
    checkers: dict[str, Result] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"valid": self.valid}
        if self.checkers:
            body["checkers"] = {name: r.to_json() for name, r in self.checkers.items()}
        else:
            body["anomalies"] = {name: a.to_json() for name, a in self.anomalies.items()}
            body["stats"] = self.stats
        if self.allowed:
            body["allowed"] = self.allowed
        if self.error is not None:
            body["error"] = self.error
        body["seconds"] = round(self.seconds, 6)
        return body

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> Result:
        return cls(
            valid=body["valid"],
            anomalies={name: Anomaly(a["count"], list(a["examples"]))
                       for name, a in body.get("anomalies", {}).items()},
            stats=dict(body.get("stats", {})),
            seconds=float(body.get("seconds", 0.0)),
            allowed=list(body.get("allowed", [])),
            error=body.get("error"),
            checkers={name: cls.from_json(r) for name, r in body.get("checkers", {}).items()},
        )


class Checker(Protocol):
    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result: ...


class AnalysisChecker(ABC):
    """A checker that works from the folded queue analysis (`checker.queue.QueueAnalysis`).

    `check` takes the analysis from `opts["queue_analysis"]`, else computes it from
    the history in the calling process, so an AnalysisChecker is also a Checker.
    """

    @abstractmethod
    def check_analysis(self, test: Mapping[str, Any], analysis: QueueAnalysis,
                       opts: Mapping[str, Any]) -> Result: ...

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        analysis = opts.get("queue_analysis")
        if analysis is None:
            from checker.queue import analyse  # checker.queue imports us
            from checker.queue_finders import QueueBudget

            analysis = analyse(history, budget=QueueBudget.of(test, opts))
        if analysis.unknown:
            return Result("unknown", error="; ".join(analysis.unknown))
        return self.check_analysis(test, analysis, opts)


def merge_valid(verdicts: Iterable[Verdict]) -> Verdict:
    """false beats "unknown" beats true; no verdicts at all is true."""
    merged: Verdict = True
    for verdict in verdicts:
        if verdict is False:
            return False
        if verdict is not True:
            merged = "unknown"
    return merged


def condense(witnesses: Sequence[dict[str, Any]], count: int | None = None) -> Anomaly:
    """Jepsen's condense-error: every witness when there are at most 32, else the first 8.

    `count` is the number of occurrences when `witnesses` is already a sample of them.
    """
    count = len(witnesses) if count is None else count
    kept = witnesses if count <= CONDENSE_LIMIT else witnesses[:CONDENSE_KEEP]
    return Anomaly(count, list(kept))


def check_safe(checker: Checker, test: Mapping[str, Any], history: Sequence[Op],
               opts: Mapping[str, Any]) -> Result:
    """Run a checker; a crash becomes an "unknown" result carrying the error."""
    return _safely(lambda: checker.check(test, history, opts))


def check_analysis_safe(checker: AnalysisChecker, test: Mapping[str, Any],
                        analysis: QueueAnalysis, opts: Mapping[str, Any]) -> Result:
    """Run an AnalysisChecker on an analysis; an analysis past its budget, or a crash, is an
    "unknown" result with the reason."""
    if analysis.unknown:
        return Result("unknown", error="; ".join(analysis.unknown))
    return _safely(lambda: checker.check_analysis(test, analysis, opts))


def _safely(run: Callable[[], Result]) -> Result:
    started = time.monotonic()
    try:
        result = run()
    except Exception as error:  # noqa: BLE001 - any crash is an unknown verdict
        return Result("unknown", error=_describe(error), seconds=time.monotonic() - started)
    if not result.seconds:
        result.seconds = time.monotonic() - started
    return result


def _describe(error: BaseException) -> str:
    last = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
    where = f" at {last[0].filename}:{last[0].lineno}" if last else ""
    return f"{type(error).__name__}: {error}{where}"


@dataclass(frozen=True)
class Composed:
    """Several named checkers run as one; each is run with `check_safe`. The queue
    analysis is computed once for all the AnalysisCheckers among them."""

    checkers: Mapping[str, Checker]

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        if opts.get("queue_analysis") is None and sum(
                isinstance(c, AnalysisChecker) for c in self.checkers.values()) > 1:
            from checker.queue import analyse  # checker.queue imports us
            from checker.queue_finders import QueueBudget

            with contextlib.suppress(Exception):  # each checker then reports the error itself
                opts = {**opts, "queue_analysis": analyse(
                    history, budget=QueueBudget.of(test, opts))}
        results = {name: check_safe(c, test, history, opts) for name, c in self.checkers.items()}
        return compose_results(results, time.monotonic() - started)


def compose(checkers: Mapping[str, Checker]) -> Composed:
    """A checker running every named checker and merging their verdicts."""
    return Composed(dict(checkers))


def compose_results(results: Mapping[str, Result], seconds: float = 0.0) -> Result:
    """The composed result of named results (used by `compose` and by `checker.spark`)."""
    return Result(merge_valid(r.valid for r in results.values()), seconds=seconds,
                  checkers=dict(results))
