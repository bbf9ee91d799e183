"""Linearizability checking: is there a legal sequential order that respects real time?

Each partition (P-compositionality: a history is linearizable iff every
partition of the model is) is decided by a portfolio of two complete searches
over the same entries (checker/lin/entries.py), run in one process under one
budget:

- the frontier sweep (checker/lin/sweep.py): Wing & Gong with Lowe's
  just-in-time linearization and memoised configurations, organised as a
  sweep over the events; it proves histories invalid fast, because it meets
  the return that cannot be reached without trying orders past it;
- the depth-first search (checker/lin/dfs.py), as Porcupine's: one
  configuration, a memo of (linearized set, state), backtracking; it walks
  straight through valid histories with many concurrent processes, where
  the sweep's frontier grows.

Both are generators that yield every few hundred steps. The portfolio
always resumes the one that is furthest behind its share of the time: two
thirds for the depth-first search, which usually wins on valid histories
(the common case), one third for the sweep, enough for the invalid ones only
it can decide. The first to finish gives the verdict, which is final either
way since both are complete. A counterexample comes from the search that
proved the history invalid.

Budgets are checked between slices: the seconds are shared, the number of
configurations is per search (a search holding more gives up, and the other
goes on). When time runs out, or both searches gave up, the answer is
`unknown` with the reason, never a guess.

The entry points are `check_operations` (one history, every partition) and
`check_partition` (one partition).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from checker.core import Verdict, merge_valid
from checker.history import Operation
from checker.lin.dfs import DepthFirst
from checker.lin.entries import Counterexample, MemoExhausted, prepare_entries
from checker.lin.models import Model
from checker.lin.sweep import Sweep

__all__ = [
    "DEFAULT_BUDGET_SECONDS",
    "DEFAULT_MAX_CONFIGURATIONS",
    "Budget",
    "Counterexample",
    "PartitionResult",
    "SearchResult",
    "check_operations",
    "check_partition",
    "partitions_of",
]

DEFAULT_BUDGET_SECONDS = 60.0
DEFAULT_MAX_CONFIGURATIONS = 2_000_000
SHARES = {DepthFirst: 2.0, Sweep: 1.0}  # the parts of the time each search gets


@dataclass(frozen=True)
class Budget:
    """Limits for one partition's search: seconds for the portfolio, configurations held
    by each search."""

    seconds: float = DEFAULT_BUDGET_SECONDS
    max_configurations: int = DEFAULT_MAX_CONFIGURATIONS


@dataclass(frozen=True)
class PartitionResult:
    partition: Hashable
    ops: int
    valid: Verdict
    seconds: float
    reason: str | None = None
    configurations: int = 0
    counterexample: Counterexample | None = None

    def to_json(self) -> dict[str, Any]:
        """The shape of `kchaos check-lin --json`'s partition results (reports read it)."""
        body: dict[str, Any] = {
            "partition": self.partition,
            "ops": self.ops,
            "valid": self.valid,
            "seconds": round(self.seconds, 6),
            "reason": self.reason,
            "configurations": self.configurations,
        }
        if self.counterexample is not None:
            body["counterexample"] = self.counterexample.to_json()
        return body


@dataclass(frozen=True)
class SearchResult:
    """The search's verdict over all partitions (`merge_valid` of theirs); a checker wraps
    it in `checker.core.Result`."""

    valid: Verdict
    partitions: list[PartitionResult] = field(default_factory=list)


def partitions_of(model: Model, ops: Sequence[Operation]) -> dict[Hashable, list[Operation]]:
    """The independent sub-histories of `ops` under `model` (one when it has no partition)."""
    if model.partition is None:
        return {None: list(ops)}
    return model.partition(ops)


def check_operations(
    model: Model,
    ops: Sequence[Operation],
    *,
    complete: bool = False,
    budget: Budget | None = None,
) -> SearchResult:
    """Check every partition; stop at the first invalid one unless `complete`."""
    results = []
    for key, part in sorted(partitions_of(model, ops).items(), key=lambda kv: repr(kv[0])):
        result = check_partition(model, part, key=key, budget=budget)
        results.append(result)
        if result.valid is False and not complete:
            break
    return SearchResult(merge_valid(r.valid for r in results), results)


def check_partition(
    model: Model,
    ops: Sequence[Operation],
    *,
    key: Hashable = None,
    budget: Budget | None = None,
) -> PartitionResult:
    """Decide one partition within its budget: the sweep and the depth-first search,
    interleaved, the first to finish decides."""
    budget = budget or Budget()
    started = time.monotonic()
    entries = prepare_entries(model, ops)
    searches = [search_class(model, entries, budget.max_configurations)
                for search_class in SHARES]
    runs = {search: search.run() for search in searches}
    spent = dict.fromkeys(searches, 0.0)
    reason = None
    while runs:
        search = min(runs, key=lambda s: spent[s] / SHARES[type(s)])
        slice_started = time.monotonic()
        try:
            next(runs[search])
        except StopIteration as finished:
            counterexample = None if finished.value else search.counterexample()
            return PartitionResult(key, len(ops), finished.value, time.monotonic() - started,
                                   configurations=_held(searches),
                                   counterexample=counterexample)
        except MemoExhausted as exhausted:
            reason = str(exhausted)
            del runs[search]
        now = time.monotonic()
        spent[search] += now - slice_started
        if now - started > budget.seconds:
            reason = f"time budget exhausted after {budget.seconds:g} s"
            break
    return PartitionResult(key, len(ops), "unknown", time.monotonic() - started,
                           reason=reason, configurations=_held(searches))


def _held(searches: Sequence[Sweep | DepthFirst]) -> int:
    return sum(search.configurations for search in searches)
