"""The frontier sweep: Wing & Gong's search with memoised configurations, organised as a
sweep over the history's events (Lowe's just-in-time linearization).

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
  after their call, or never; they stay pending forever. Two such operations
  with the same function and input are interchangeable, so only the earliest
  of each kind is tried; and a configuration that left one unapplied
  dominates the same one that applied it.
- Failed operations, and read-only ones of unknown outcome, are no entries
  (checker/lin/entries.py).

The sweep decides invalid histories fast, since it meets the return that
cannot be reached without trying orders past it; with many concurrent
processes its frontier grows where the depth-first search
(checker/lin/dfs.py) walks straight through a valid history.

`run` is a generator that yields every few hundred steps, so that a
portfolio can interleave it with the depth-first search, and returns the
verdict.
"""

from __future__ import annotations

from collections.abc import Generator, Hashable, Sequence
from typing import Any

from checker.lin.entries import (
    Counterexample,
    Entry,
    MemoExhausted,
    depth,
    explain,
    extend,
    trail_order,
)
from checker.lin.models import Model

STEPS_PER_SLICE = 64

_CALL, _RETURN = 0, 1


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


class Sweep:
    """One sweep over a partition's events, holding the frontier of configurations."""

    def __init__(self, model: Model, entries: Sequence[Entry], max_configurations: int):
        self.model = model
        self.step = model.step
        self.entries = entries
        events = [(e.op.call, _CALL, e.id) for e in entries]
        events += [(e.op.ret, _RETURN, e.id) for e in entries if not e.unknown]
        self.events = sorted(events)
        self.max_configurations = max_configurations
        self.configurations = 0
        self.pending_writers: list[Entry] = []
        self.pending_readers: list[Entry] = []
        self.frontier = _Configurations()
        self.frontier.add(model.init(), 0, 0, None)
        self.failure: tuple[Entry, Hashable, int, Any] | None = None

    def run(self) -> Generator[None, None, bool]:
        """Sweep; yields between slices of work, returns whether the partition is
        linearizable."""
        for done, (_, kind, entry_id) in enumerate(self.events, 1):
            if done % STEPS_PER_SLICE == 0:
                yield
            entry = self.entries[entry_id]
            if kind == _CALL:
                self._call(entry)
            elif not (yield from self._return(entry)):
                return False
        return True

    # -- events

    def _call(self, entry: Entry) -> None:
        if not entry.read_only:
            self.pending_writers.append(entry)
            return
        self.pending_readers.append(entry)
        bit, step, op = 1 << entry.id, self.step, entry.op
        frontier = _Configurations()
        for state, ok_bits, info_bits, trail in self.frontier.items():
            legal, new_state = step(state, op)
            if legal and new_state == state:
                frontier.add(state, ok_bits | bit, info_bits, extend(trail, entry.id))
            else:
                frontier.add(state, ok_bits, info_bits, trail)
        self.frontier = frontier

    def _return(self, entry: Entry) -> Generator[None, None, bool]:
        bit = 1 << entry.id
        survivors = _Configurations()
        unresolved = []
        for state, ok_bits, info_bits, trail in self.frontier.items():
            if ok_bits & bit:
                survivors.add(state, ok_bits & ~bit, info_bits, trail)
            else:
                unresolved.append((state, ok_bits, info_bits, trail))
        if unresolved:
            yield from self._linearize_through(entry, unresolved, survivors)
        if entry.read_only:
            self.pending_readers.remove(entry)
        else:
            self.pending_writers.remove(entry)
        if not survivors.size:
            return False
        self.frontier = survivors
        return True

    # -- the closure at a return

    def _linearize_through(self, target: Entry, starts: list,
                           survivors: _Configurations) -> Generator[None, None, None]:
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
            if expansions % STEPS_PER_SLICE == 0:
                if seen.size + survivors.size > self.max_configurations:
                    raise MemoExhausted(f"memo budget exhausted: more than "
                                        f"{self.max_configurations} configurations")
                yield
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
                new_trail = extend(trail, entry.id)
                if new_state != state:
                    new_ok, new_trail = self._read_greedily(new_state, new_ok, new_trail)
                if new_ok & target_bit:
                    survivors.add(new_state, new_ok & ~target_bit, new_info, new_trail)
                elif seen.add(new_state, new_ok, new_info, new_trail):
                    stack.append((new_state, new_ok, new_info, new_trail))
                    if new_trail[2] > depth(best[3]):
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
                trail = extend(trail, entry.id)
        return ok_bits, trail

    # -- explanation

    def counterexample(self) -> Counterexample:
        assert self.failure is not None
        target, state, linearized, trail = self.failure
        pending = [e for e in self.pending_writers + self.pending_readers
                   if e is not target and not (linearized >> e.id) & 1]
        return explain(self.model, self.entries, trail_order(trail), state, target, pending)
