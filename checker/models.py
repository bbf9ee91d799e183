"""Sequential specifications for the linearizability checker.

A `Model` is a handful of pure functions, in Porcupine's spirit: `init` gives
the initial state, `step(state, op)` says whether the operation is legal in
that state and what state follows. States must be hashable and compare by
value, so the checker can memoise configurations. `partition` splits a
history into independent sub-histories (P-compositionality: a history is
linearizable iff every partition is), and `read_only` marks operations that
never change the object; when such an op leaves the state as it was, the
checker linearizes it at once instead of branching on it.

A state may stand for a set of concrete states, as the kv model's does (see
there); `step` must then accept an op wherever some state of the set does,
and leave the set of what remains possible.

Values follow Jepsen's conventions: register `read` (null at invoke, the value
read at ok), `write` v, `cas` [from, to]; keyed ops carry [key, v].
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from checker.history import Operation

State = Hashable
Step = Callable[[State, Operation], tuple[bool, State]]


def _never_read_only(f: str, value: Any) -> bool:
    return False


def _describe_operation(op: Operation) -> str:
    output = "" if op.status != "ok" else f" -> {op.output!r}"
    return f"{op.f}({op.input!r}){output}"


@dataclass(frozen=True, kw_only=True)
class Model:
    """A sequential specification: pure functions only, `step` must not mutate its state."""

    name: str
    init: Callable[[], State]
    step: Step
    partition: Callable[[Sequence[Operation]], dict[Hashable, list[Operation]]] | None = None
    read_only: Callable[[str, Any], bool] = _never_read_only
    describe_operation: Callable[[Operation], str] = _describe_operation
    describe_state: Callable[[State], str] = repr


def partition_by_key(ops: Sequence[Operation]) -> dict[Hashable, list[Operation]]:
    """Keyed ops carry [key, value]; each key is an independent object."""
    parts: dict[Hashable, list[Operation]] = defaultdict(list)
    for op in ops:
        parts[_hashable(op.input[0])].append(op)
    return dict(parts)


def _hashable(value: Any) -> Hashable:
    return tuple(_hashable(v) for v in value) if isinstance(value, list) else value


# --- register: read / write, initial value nil ----------------------------------------------


def _register_step(state: State, op: Operation) -> tuple[bool, State]:
    if op.f == "read":
        return op.output == state, state
    if op.f == "write":
        return True, op.input
    raise ValueError(f"register: unknown operation {op.f!r}")


REGISTER = Model(
    name="register",
    init=lambda: None,
    step=_register_step,
    read_only=lambda f, value: f == "read",
)


# --- cas-register: read / write / cas [from, to], as etcd ------------------------------------


def _cas_register_step(state: State, op: Operation) -> tuple[bool, State]:
    if op.f == "cas":
        expected, new = op.input
        return state == expected, new if state == expected else state
    return _register_step(state, op)


CAS_REGISTER = Model(
    name="cas-register",
    init=lambda: None,
    step=_cas_register_step,
    read_only=lambda f, value: f == "read",
)


# --- kv: get / put / append on strings, one independent register per key ---------------------
#
# Appended values are unique and a get returns the whole string, so the order of concurrent
# appends matters only once a get observes it. The state is therefore (observed, unordered):
# the string as last fixed by a put or a get, and the appends applied since, as a set of
# (value, call, return, invoke index) whose order is still open. It stands for every string
# observed + v1 + v2 + ... over the orders of the set that respect real time (an append that
# returned before another was called comes first). A get matches if one such order spells
# its output, and collapses the set into that string. This keeps one state where a concrete
# search would hold one per order of the pending appends.

_NEVER = float("inf")


def _kv_step(state: State, op: Operation) -> tuple[bool, State]:
    observed, unordered = state
    if op.f == "get":
        read = op.output[1]
        if not unordered:
            return read == observed, state
        if not read.startswith(observed) or not _spells(read, len(observed), unordered):
            return False, state
        return True, (read, frozenset())
    if op.f == "put":
        return True, (op.input[1], frozenset())
    if op.f == "append":
        returned = _NEVER if op.ret is None else op.ret
        return True, (observed, unordered | {(op.input[1], op.call, returned, op.invoke_index)})
    raise ValueError(f"kv: unknown operation {op.f!r}")


def _spells(text: str, position: int, appends: frozenset) -> bool:
    """Whether text[position:] concatenates all `appends` in an order respecting real time."""
    if not appends:
        return position == len(text)
    for append in appends:
        value, call, _, _ = append
        if not text.startswith(value, position):
            continue
        if any(ret < call for _, _, ret, _ in appends):
            continue
        if _spells(text, position + len(value), appends - {append}):
            return True
    return False


def _describe_kv_state(state: State) -> str:
    observed, unordered = state
    if not unordered:
        return repr(observed)
    return f"{observed!r} + some order of {sorted(v for v, _, _, _ in unordered)!r}"


KV = Model(
    name="kv",
    init=lambda: ("", frozenset()),
    step=_kv_step,
    partition=partition_by_key,
    read_only=lambda f, value: f == "get",
    describe_state=_describe_kv_state,
)


# --- log: one Kafka partition per key ---------------------------------------------------------
#
# append [key, v] completes with [key, offset]: legal iff the offset is the log's length
# (any offset when the outcome is unknown).
# read [key, o] completes with [key, [v, ...]]: the values at offsets o, o+1, ... exactly as in
# the log; a read may stop early (a fetch returns what fits), so any prefix of the suffix
# from o is legal, the empty one included, but o must not lie beyond the end of the log.


def _log_step(state: State, op: Operation) -> tuple[bool, State]:
    if op.f == "append":
        offset_known = op.output is not None
        return not offset_known or op.output[1] == len(state), state + (_hashable(op.input[1]),)
    if op.f == "read":
        start, records = op.input[1], op.output[1]
        if start > len(state) or start + len(records) > len(state):
            return False, state
        return all(state[start + i] == _hashable(r) for i, r in enumerate(records)), state
    raise ValueError(f"log: unknown operation {op.f!r}")


LOG = Model(
    name="log",
    init=tuple,
    step=_log_step,
    partition=partition_by_key,
    read_only=lambda f, value: f == "read",
    describe_state=lambda state: f"log of {len(state)}: {list(state)[-8:]!r}",
)


MODELS: dict[str, Model] = {m.name: m for m in (REGISTER, CAS_REGISTER, KV, LOG)}
