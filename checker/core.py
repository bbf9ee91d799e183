"""The checker protocol, results, and Jepsen's composition of checkers.

A checker is anything with `check(test, history, opts) -> Result`. A `KeyedChecker`
also says how to split its work by key, so `checker.spark` can check the keys on
executors. `compose` runs several under names and merges their verdicts with
`merge_valid` (false beats "unknown" beats true), the one verdict merge of the
package; work they share goes through a `Memo`. `check_safe` turns a crash into an
"unknown" result that carries the error. A Result serialises to the shape of docs/checkers.md,
"Results".
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from checker.history import Op, collector_paused

__all__ = [
    "Anomaly",
    "Checker",
    "Composed",
    "KeyedChecker",
    "Memo",
    "Result",
    "Verdict",
    "check_by_key",
    "check_safe",
    "compose",
    "compose_results",
    "condense",
    "describe_error",
    "merge_valid",
    "safely",
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


@runtime_checkable
class KeyedChecker(Protocol):
    """A checker that can be split by key: `split` the history into keyed parts, check one
    part anywhere (`check_key` is pure, and its part and answer are picklable, so a Spark
    executor can run it), and `merge` the parts' answers, in key order, into the Result
    that `check` gives. `checker.spark` distributes any such checker key by key, handing
    `split` the history's ops, parsed and validated once on the driver."""

    def split(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> list[tuple[Hashable, Any]]: ...

    def check_key(self, test: Mapping[str, Any], key: Hashable, part: Any,
                  opts: Mapping[str, Any]) -> Any: ...

    def merge(self, test: Mapping[str, Any], checked: Sequence[tuple[Hashable, Any]],
              opts: Mapping[str, Any], seconds: float) -> Result: ...

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result: ...


def check_by_key(checker: KeyedChecker, test: Mapping[str, Any], history: Sequence[Op],
                 opts: Mapping[str, Any]) -> Result:
    """A KeyedChecker's check in the calling process: split, check each key, merge."""
    started = time.monotonic()
    with collector_paused():
        parts = checker.split(test, history, opts)
    checked = [(key, checker.check_key(test, key, part, opts)) for key, part in parts]
    return checker.merge(test, checked, opts, time.monotonic() - started)


class Memo:
    """Work that several checkers of one check share, computed once by whichever asks first
    (as Jepsen's history tasks); a computation that raises is not kept."""

    def __init__(self) -> None:
        self._values: dict[str, Any] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def get(self, name: str, compute: Callable[[], Any]) -> Any:
        with self._guard:
            lock = self._locks.setdefault(name, threading.Lock())
        with lock:
            if name not in self._values:
                self._values[name] = compute()
            return self._values[name]


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
    return safely(lambda: checker.check(test, history, opts))


def safely(run: Callable[[], Result]) -> Result:
    """The Result of `run`; a crash becomes an "unknown" result carrying the error."""
    started = time.monotonic()
    try:
        result = run()
    except Exception as error:  # noqa: BLE001 - any crash is an unknown verdict
        return Result("unknown", error=describe_error(error), seconds=time.monotonic() - started)
    if not result.seconds:
        result.seconds = time.monotonic() - started
    return result


def describe_error(error: BaseException) -> str:
    """The error as one line: its type, message and where it was raised."""
    last = traceback.extract_tb(error.__traceback__)[-1:] if error.__traceback__ else []
    where = f" at {last[0].filename}:{last[0].lineno}" if last else ""
    return f"{type(error).__name__}: {error}{where}"


@dataclass(frozen=True)
class Composed:
    """Several named checkers run as one; each is run with `check_safe`. Work they share
    (the queue analysis, say) goes through one `Memo` in `opts["memo"]`."""

    checkers: Mapping[str, Checker]

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        opts = {**opts, "memo": opts.get("memo") or Memo()}
        results = {name: check_safe(c, test, history, opts) for name, c in self.checkers.items()}
        return compose_results(results, time.monotonic() - started)


def compose(checkers: Mapping[str, Checker]) -> Composed:
    """A checker running every named checker and merging their verdicts."""
    return Composed(dict(checkers))


def compose_results(results: Mapping[str, Result], seconds: float = 0.0) -> Result:
    """The composed result of named results (used by `compose` and by `checker.spark`)."""
    return Result(merge_valid(r.valid for r in results.values()), seconds=seconds,
                  checkers=dict(results))
