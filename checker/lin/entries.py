"""What both linearizability searches see: a partition's entries, and how a failure is told.

An *entry* is one operation that may take effect: failed operations (`fail`)
did not happen and are left out, and so are read-only operations of unknown
outcome, which constrain nothing. `prepare_entries` numbers the rest in call
order. `explain` turns a search's furthest configuration into the
`Counterexample` of a report.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from checker.history import Operation
from checker.lin.models import Model, State


@dataclass(frozen=True, slots=True)
class Entry:
    """One operation of the partition as the searches see it; `kind` (f and input) says which
    unknown-outcome operations are interchangeable."""

    id: int
    op: Operation
    read_only: bool
    unknown: bool
    kind: Hashable


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


class MemoExhausted(Exception):
    """A search holds more configurations than its budget allows."""


def prepare_entries(model: Model, ops: Sequence[Operation]) -> list[Entry]:
    """The entries of `ops`, numbered in call order (invoke order at equal calls)."""
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
    return [Entry(i, op, read_only, unknown, (op.f, freeze(op.input)))
            for i, (op, read_only, unknown) in enumerate(kept)]


def freeze(value: Any) -> Hashable:
    if isinstance(value, list):
        return tuple(freeze(v) for v in value)
    if isinstance(value, dict):
        return tuple(sorted((k, freeze(v)) for k, v in value.items()))
    return value


def explain(model: Model, entries: Sequence[Entry], order: Sequence[int], state: State,
            stuck: Entry, pending: Sequence[Entry]) -> Counterexample:
    """The counterexample of a search that linearized `order` (entry ids), reached `state`,
    and could not go on to linearize `stuck` while `pending` were open."""
    involved = [entries[i] for i in order] + [stuck, *pending]
    return Counterexample(
        prefix=[entries[i].op.invoke_index for i in order],
        state=model.describe_state(state),
        stuck=[stuck.op.invoke_index],
        pending=[e.op.invoke_index for e in pending],
        descriptions={e.op.invoke_index: model.describe_operation(e.op) for e in involved},
    )


def trail_order(trail: Any) -> list[int]:
    """The entry ids of a trail, first linearized first. A trail is the linked list
    (last entry id, previous trail, length), or None when empty."""
    order = []
    while trail is not None:
        entry_id, trail, _ = trail
        order.append(entry_id)
    order.reverse()
    return order


def extend(trail: Any, entry_id: int) -> tuple[int, Any, int]:
    return (entry_id, trail, 1 if trail is None else trail[2] + 1)


def depth(trail: Any) -> int:
    return 0 if trail is None else trail[2]
