"""Depth-first linearizability search with backtracking, as Porcupine's `checkSingle`.

The partition's events form a doubly linked list in time order (calls before
returns at equal times). The search keeps one configuration, (model state,
set of linearized entries as a bitset int), and a stack of the moves that led
there:

- Lowe's just-in-time linearization: only entries whose call precedes the
  first return still in the list may be linearized next (the *window*); an
  entry whose return heads the list must go before anything called later.
- A move linearizes one entry of the window that the state makes legal and
  lifts its call and return out of the list (dancing links: undone in reverse
  order). A configuration already in the memo was explored and failed, so it
  is not entered again.
- When the first return of the list is reached and nothing in the window
  moves, the search backtracks: it restores the last move and tries the next
  entry after it. Backtracking past the first move means no order exists.

Reductions, the sweep's as well (checker/lin/sweep.py), keep it narrow:

- A read-only entry of the window that the state makes legal and leaves as it
  is joins the current move at once (doing it earlier never hurts), so the
  search never branches on it.
- Unknown-outcome (`info`) entries may take effect at any time after their
  call, or never: their return is at the end of the history, as in
  Porcupine, and the search succeeds once every `ok` entry is linearized,
  whatever of them is left. Two of the same kind (f and input) are
  interchangeable, so they are linearized in call order only.

`run` is a generator that yields every few hundred steps, so that a
portfolio can interleave it with the sweep, and returns the verdict.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

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

STEPS_PER_SLICE = 512


class DepthFirst:
    """One depth-first search of a partition's entries."""

    def __init__(self, model: Model, entries: Sequence[Entry], max_configurations: int):
        self.model = model
        self.entries = entries
        self.max_configurations = max_configurations
        self.memo: set = set()
        self.best: tuple = (None, model.init(), 0)  # the deepest (trail, state, linearized)

    @property
    def configurations(self) -> int:
        return len(self.memo)

    def run(self) -> Generator[None, None, bool]:
        """Search; yields between slices of work, returns whether the partition is linearizable."""
        entries, count = self.entries, len(self.entries)
        head = 2 * count
        nxt, prv = _linked_events(entries)
        ops = [e.op for e in entries]
        read_only = [e.read_only for e in entries]
        unknown = [e.unknown for e in entries]
        twin_before = _earlier_twins(entries)
        done = bytearray(count)
        step, memo = self.model.step, self.memo

        def lift(e: int) -> None:
            for node in (e,) if unknown[e] else (e, count + e):
                nxt[prv[node]], prv[nxt[node]] = nxt[node], prv[node]
            done[e] = 1

        def unlift(e: int) -> None:
            for node in (e,) if unknown[e] else (count + e, e):
                nxt[prv[node]] = prv[nxt[node]] = node
            done[e] = 0

        def read_greedily(state, linearized: int, trail) -> tuple[int, list[int], object]:
            """Lift every read-only entry of the window that `state` allows and keeps."""
            joined = []
            node = nxt[head]
            while node < count:
                if read_only[node]:
                    legal, new_state = step(state, ops[node])
                    if legal and new_state == state:
                        joined.append(node)
                        linearized |= 1 << node
                        trail = extend(trail, node)
                node = nxt[node]
            for e in joined:
                lift(e)
            return linearized, joined, trail

        remaining = unknown.count(False)
        state = self.model.init()
        linearized, joined, trail = read_greedily(state, 0, None)
        remaining -= len(joined)
        self.best = (trail, state, linearized)
        stack: list[tuple] = []
        node, steps = nxt[head], 0
        while remaining:
            steps += 1
            if steps % STEPS_PER_SLICE == 0:
                if len(memo) > self.max_configurations:
                    raise MemoExhausted(
                        f"memo budget exhausted: more than {self.max_configurations} "
                        f"configurations")
                yield
            if node >= count:
                if not stack:
                    return False
                e, state, linearized, joined, trail = stack.pop()
                for read in reversed(joined):
                    unlift(read)
                unlift(e)
                remaining += len(joined) + (not unknown[e])
                node = nxt[e]
                continue
            e = node
            node = nxt[node]
            if unknown[e] and twin_before[e] >= 0 and not done[twin_before[e]]:
                continue
            legal, new_state = step(state, ops[e])
            if not legal:
                continue
            moved = linearized | 1 << e
            if (moved, new_state) in memo:
                continue
            memo.add((moved, new_state))
            lift(e)
            moved, joined, new_trail = read_greedily(new_state, moved, extend(trail, e))
            stack.append((e, state, linearized, joined, trail))
            remaining -= len(joined) + (not unknown[e])
            state, linearized, trail = new_state, moved, new_trail
            if trail[2] > depth(self.best[0]):
                self.best = (trail, state, linearized)
            node = nxt[head]
        return True

    def counterexample(self) -> Counterexample:
        """The deepest configuration reached, and the first return it could not get past."""
        trail, state, linearized = self.best
        open_entries = [e for e in self.entries if not (linearized >> e.id) & 1]
        stuck = min((e for e in open_entries if not e.unknown),
                    key=lambda e: (e.op.ret, e.op.invoke_index))
        pending = [e for e in open_entries if e is not stuck and e.op.call <= stuck.op.ret]
        return explain(self.model, self.entries, trail_order(trail), state, stuck, pending)


def _linked_events(entries: Sequence[Entry]) -> tuple[list[int], list[int]]:
    """The linked list of events in time order, calls before returns at equal times.

    Node e is entry e's call, node count + e its return (unknown-outcome entries have
    none), node 2 count the head; the list ends at node 2 count + 1.
    """
    count = len(entries)
    events = [(e.op.call, 0, e.id) for e in entries]
    events += [(e.op.ret, 1, count + e.id) for e in entries if not e.unknown]
    events.sort()
    chain = [2 * count, *(node for _, _, node in events), 2 * count + 1]
    nxt, prv = [0] * (2 * count + 2), [0] * (2 * count + 2)
    for before, after in zip(chain, chain[1:], strict=False):
        nxt[before], prv[after] = after, before
    return nxt, prv


def _earlier_twins(entries: Sequence[Entry]) -> list[int]:
    """For each unknown-outcome entry, the previous one of its kind (-1: none)."""
    last: dict = {}
    twins = [-1] * len(entries)
    for e in entries:
        if e.unknown:
            twins[e.id] = last.get(e.kind, -1)
            last[e.kind] = e.id
    return twins
