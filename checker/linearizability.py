"""Linearizability checking: is there a legal sequential order that respects real time?

The search is Wing & Gong's, with the memoised configurations of Lowe and
Porcupine, organised as a sweep over the history's events (Lowe's
just-in-time linearization):

- A *configuration* is (model state, set of pending operations already
  linearized). The *frontier* holds every distinct configuration reachable
  at the current point of the sweep; it is a set, so equal configurations
  reached along different orders are explored once.
- A call event adds an operation to the pending set; nothing is decided.
- At the return event of operation o, o must be linearized: from every
  configuration of the frontier, the search linearizes any sequence of
  pending operations that ends with o (and only those: what may come after o
  is decided at later returns). If no configuration survives, the history is
  not linearizable and o is the operation that cannot be placed.

Three reductions keep the frontier small without losing completeness:

- Read-only operations (the model says which) never change the object, so a
  pending one is linearized as soon as the state makes it legal: doing it
  earlier never hurts. The search never branches on them.
- Operations with an unknown outcome (`info`) may take effect at any time
  after their call, or never. Read-only ones constrain nothing and are
  dropped; the others stay pending forever. Two such operations with the
  same function and input are interchangeable, so only the earliest of each
  kind is tried.
- Failed operations (`fail`) did not happen and are dropped.

Budgets (seconds, configurations held) are checked while searching; when one
runs out the answer is `unknown` with the reason, never a guess.

The entry points are `check_operations` (one history, every partition) and
`check_partition` (one partition).
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from checker.checkers import Verdict, merge_valid
from checker.history import Operation
from checker.models import Model

DEFAULT_BUDGET_SECONDS = 60.0
DEFAULT_MAX_CONFIGURATIONS = 2_000_000
_BUDGET_CHECK_INTERVAL = 2048


@dataclass(frozen=True)
class Budget:
    """Limits for one partition's search."""

    seconds: float = DEFAULT_BUDGET_SECONDS
    max_configurations: int = DEFAULT_MAX_CONFIGURATIONS


@dataclass(frozen=True)
class Counterexample:
    """Why a partition is not linearizable, fit for a report.

    `prefix` is the longest linearizable order found (invoke indices of the
    history), `state` the model state after it, `stuck` the operation whose
    return could not be reached from any configuration, `pending` the other
    operations open at that moment.
    """

    prefix: list[int]
    state: str
    stuck: list[int]
    pending: list[int]
    descriptions: dict[int, str]

    def to_json(self) -> dict[str, Any]:
        return {
            "prefix": self.prefix,
            "state": self.state,
            "stuck": self.stuck,
            "pending": self.pending,
            "descriptions": {str(k): v for k, v in self.descriptions.items()},
        }


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
    it in `checker.checkers.Result`."""

    valid: Verdict
    partitions: list[PartitionResult] = field(default_factory=list)


class _BudgetExhausted(Exception):
    pass


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
    """Decide one partition within its budget."""
    budget = budget or Budget()
    started = time.monotonic()
    search = _Search(model, ops, budget, started)
    try:
        valid = search.run()
    except _BudgetExhausted as exhausted:
        return PartitionResult(key, len(ops), "unknown", time.monotonic() - started,
                               reason=str(exhausted), configurations=search.configurations)
    counterexample = None if valid else search.counterexample()
    return PartitionResult(key, len(ops), valid, time.monotonic() - started,
                           configurations=search.configurations, counterexample=counterexample)


# --- the search -------------------------------------------------------------------------------

_CALL, _RETURN = 0, 1


@dataclass(frozen=True, slots=True)
class _Entry:
    """One operation of the partition as the search sees it."""

    id: int
    op: Operation
    read_only: bool
    unknown: bool
    kind: Hashable


Event = tuple[int, int, int]


def _prepare(model: Model, ops: Sequence[Operation]) -> tuple[list[_Entry], list[Event]]:
    """Entries in call order, and the events: calls before returns at equal times."""
    kept = []
    for op in ops:
        if op.status == "fail":
            continue
        read_only = model.read_only(op.f, op.input)
        unknown = op.status != "ok" or op.ret is None
        if unknown and read_only:
            continue
        kept.append((op, read_only, unknown))
    kept.sort(key=lambda item: (item[0].call, item[0].invoke_index))
    entries = [
        _Entry(i, op, read_only, unknown, (op.f, _freeze(op.input)))
        for i, (op, read_only, unknown) in enumerate(kept)
    ]
    events = [(e.op.call, _CALL, e.id) for e in entries]
    events += [(e.op.ret, _RETURN, e.id) for e in entries if not e.unknown]
    events.sort()
    return entries, events


def _freeze(value: Any) -> Hashable:
    if isinstance(value, list):
        return tuple(_freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, _freeze(v)) for k, v in value.items()))
    return value


class _Configurations:
    """A set of configurations (state, ok bits, info bits), each with a trail.

    `ok bits` are the `ok` entries linearized but not yet returned, `info bits`
    the `info` entries linearized so far. A configuration dominates another
    with the same state and ok bits when its info bits are a subset: leaving
    an unknown-outcome op unapplied is always at least as good, since it may
    never take effect. Only undominated configurations are kept. A trail is
    the linked list (entry id, previous trail, length) of the linearization
    order, kept for counterexamples.
    """

    __slots__ = ("groups", "size")

    def __init__(self) -> None:
        self.groups: dict[tuple[Hashable, int], dict[int, Any]] = {}
        self.size = 0

    def add(self, state: Hashable, ok_bits: int, info_bits: int, trail: Any) -> bool:
        """Add unless dominated; drop what the new one dominates. True when added."""
        group = self.groups.get((state, ok_bits))
        if group is None:
            self.groups[(state, ok_bits)] = {info_bits: trail}
            self.size += 1
            return True
        if info_bits in group:
            return False
        for other in group:
            if other & ~info_bits == 0:
                return False
        dominated = [other for other in group if info_bits & ~other == 0]
        for other in dominated:
            del group[other]
        group[info_bits] = trail
        self.size += 1 - len(dominated)
        return True

    def items(self):
        for (state, ok_bits), group in self.groups.items():
            for info_bits, trail in group.items():
                yield state, ok_bits, info_bits, trail


class _Search:
    """One sweep over a partition's events, holding the frontier of configurations."""

    def __init__(self, model: Model, ops: Sequence[Operation], budget: Budget, started: float):
        self.model = model
        self.step = model.step
        self.entries, self.events = _prepare(model, ops)
        self.budget = budget
        self.deadline = started + budget.seconds
        self.configurations = 0
        self.pending_writers: list[_Entry] = []
        self.pending_readers: list[_Entry] = []
        self.frontier = _Configurations()
        self.frontier.add(model.init(), 0, 0, None)
        self.failure: tuple[_Entry, Hashable, int, Any] | None = None

    def run(self) -> bool:
        for _, kind, entry_id in self.events:
            entry = self.entries[entry_id]
            if kind == _CALL:
                self._call(entry)
            elif not self._return(entry):
                return False
        return True

    # -- events

    def _call(self, entry: _Entry) -> None:
        if not entry.read_only:
            self.pending_writers.append(entry)
            return
        self.pending_readers.append(entry)
        bit, step, op = 1 << entry.id, self.step, entry.op
        frontier = _Configurations()
        for state, ok_bits, info_bits, trail in self.frontier.items():
            legal, new_state = step(state, op)
            if legal and new_state == state:
                frontier.add(state, ok_bits | bit, info_bits, _extend(trail, entry.id))
            else:
                frontier.add(state, ok_bits, info_bits, trail)
        self.frontier = frontier

    def _return(self, entry: _Entry) -> bool:
        bit = 1 << entry.id
        survivors = _Configurations()
        unresolved = []
        for state, ok_bits, info_bits, trail in self.frontier.items():
            if ok_bits & bit:
                survivors.add(state, ok_bits & ~bit, info_bits, trail)
            else:
                unresolved.append((state, ok_bits, info_bits, trail))
        if unresolved:
            self._linearize_through(entry, unresolved, survivors)
        if entry.read_only:
            self.pending_readers.remove(entry)
        else:
            self.pending_writers.remove(entry)
        if not survivors.size:
            return False
        self.frontier = survivors
        return True

    # -- the closure at a return

    def _linearize_through(self, target: _Entry, starts: list, survivors: _Configurations) -> None:
        """Add to `survivors` each configuration reached by pending ops ending with `target`."""
        target_bit = 1 << target.id
        step = self.step
        seen = _Configurations()
        for state, ok_bits, info_bits, trail in starts:
            seen.add(state, ok_bits, info_bits, trail)
        stack = list(starts)
        best = starts[0]
        expansions = 0
        while stack:
            state, ok_bits, info_bits, trail = stack.pop()
            expansions += 1
            if expansions % _BUDGET_CHECK_INTERVAL == 0:
                self._check_budget(seen.size + survivors.size)
            tried_kinds = set()
            for entry in self.pending_writers + self.pending_readers:
                bit = 1 << entry.id
                if entry.unknown:
                    if info_bits & bit or entry.kind in tried_kinds:
                        continue
                    tried_kinds.add(entry.kind)
                elif ok_bits & bit:
                    continue
                legal, new_state = step(state, entry.op)
                if not legal or (entry.read_only and new_state == state):
                    continue
                if entry.unknown:
                    new_ok, new_info = ok_bits, info_bits | bit
                else:
                    new_ok, new_info = ok_bits | bit, info_bits
                new_trail = _extend(trail, entry.id)
                if new_state != state:
                    new_ok, new_trail = self._read_greedily(new_state, new_ok, new_trail)
                if new_ok & target_bit:
                    survivors.add(new_state, new_ok & ~target_bit, new_info, new_trail)
                elif seen.add(new_state, new_ok, new_info, new_trail):
                    stack.append((new_state, new_ok, new_info, new_trail))
                    if new_trail[2] > _depth(best[3]):
                        best = (new_state, new_ok, new_info, new_trail)
        self.configurations += seen.size
        if not survivors.size:
            self.failure = (target, best[0], best[1] | best[2], best[3])

    def _read_greedily(self, state: Hashable, ok_bits: int, trail: Any) -> tuple[int, Any]:
        """Linearize every pending read-only op that `state` makes legal and leaves as it is.

        Sound because such an op changes nothing: moving it here from wherever a
        valid order puts it later keeps that order valid.
        """
        step = self.step
        for entry in self.pending_readers:
            bit = 1 << entry.id
            if ok_bits & bit:
                continue
            legal, new_state = step(state, entry.op)
            if legal and new_state == state:
                ok_bits |= bit
                trail = _extend(trail, entry.id)
        return ok_bits, trail

    def _check_budget(self, held: int) -> None:
        if held > self.budget.max_configurations:
            raise _BudgetExhausted(
                f"memo budget exhausted: more than {self.budget.max_configurations} configurations")
        if time.monotonic() > self.deadline:
            raise _BudgetExhausted(f"time budget exhausted after {self.budget.seconds:g} s")

    # -- explanation

    def counterexample(self) -> Counterexample:
        assert self.failure is not None
        target, state, linearized, trail = self.failure
        order = []
        while trail is not None:
            entry_id, trail, _ = trail
            order.append(entry_id)
        order.reverse()
        pending = [e for e in self.pending_writers + self.pending_readers
                   if e is not target and not (linearized >> e.id) & 1]
        involved = [self.entries[i] for i in order] + [target] + pending
        return Counterexample(
            prefix=[self.entries[i].op.invoke_index for i in order],
            state=self.model.describe_state(state),
            stuck=[target.op.invoke_index],
            pending=[e.op.invoke_index for e in pending],
            descriptions={e.op.invoke_index: self.model.describe_operation(e.op) for e in involved},
        )


def _extend(trail: Any, entry_id: int) -> tuple[int, Any, int]:
    """A trail is (last entry id, previous trail, length), or None when empty."""
    return (entry_id, trail, 1 if trail is None else trail[2] + 1)


def _depth(trail: Any) -> int:
    return 0 if trail is None else trail[2]
