"""Cas-register histories that are linearizable by construction, and invalid twins of them.

`cas_history(ops, processes, values, unknown)` simulates `processes` clients of
one register holding nil or a value in range(values). Each op gets an interval
[call, return] and a linearization point strictly inside it; the register is
applied in linearization-point order, so reads return what that order says
and a cas whose `from` differs from the register fails (Jepsen's `fail`: it
did not happen). A write or cas ends `info` with probability `unknown`: it
never completes (pending to the end of the history), took effect at its point
or never, at random, and its client carries on as a fresh process (Jepsen's
rule). The history is linearizable: the linearization points give the order.

`invalid_twin(history)` changes the value of one completed read in the middle
of the history to `values`, which no op ever writes; every state of the
register is nil or in range(values), so no order can make that read legal.

Ops are `checker.history.Op`s, written with `checker.history.write_jsonl` as
JSONL that `kchaos check-lin --model cas-register` reads. The bench
(`bench/lin_vs_porcupine.py`) and the tests both import this module, which
lives with the other test data builders because tests are its first user.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from checker.history import Op

MAX_DURATION = 20
MAX_GAP = 3


@dataclass(frozen=True)
class _Planned:
    process: int
    f: str
    call: int
    ret: int
    point: float
    unknown: bool
    value: int | list[int] | None = None


def cas_history(ops: int, processes: int, values: int, unknown: float,
                seed: int = 0) -> list[Op]:
    """`ops` operations by `processes` concurrent clients on values range(values)."""
    rng = random.Random(seed)
    planned = _plan(rng, ops, processes, unknown)
    return _record(rng, planned, values)


def invalid_twin(history: list[Op], values: int, where: float = 0.5) -> list[Op]:
    """`history` with the read completed nearest `where` (a fraction of its length) changed
    to read `values`, a value never written: not linearizable."""
    reads = [i for i, op in enumerate(history) if op.type == "ok" and op.f == "read"]
    if not reads:
        raise ValueError("the history has no completed read to change")
    target = min(reads, key=lambda i: abs(i - where * len(history)))
    twin = list(history)
    twin[target] = replace(history[target], value=values)
    return twin


def _plan(rng: random.Random, ops: int, processes: int, unknown: float) -> list[_Planned]:
    """Intervals and linearization points; each client runs one op at a time."""
    cursors = [rng.randrange(MAX_GAP) for _ in range(processes)]
    ids = list(range(processes))
    fresh = processes
    planned = []
    for n in range(ops):
        client = n % processes
        call = cursors[client] + 1 + rng.randrange(MAX_GAP)
        ret = call + 1 + rng.randrange(MAX_DURATION)
        f = rng.choice(("read", "read", "write", "cas"))
        pending = f != "read" and rng.random() < unknown
        planned.append(_Planned(ids[client], f, call, ret, rng.uniform(call, ret), pending))
        cursors[client] = ret
        if pending:
            ids[client] = fresh
            fresh += 1
    return planned


def _record(rng: random.Random, planned: list[_Planned], values: int) -> list[Op]:
    """Apply the ops in linearization-point order; the history's invokes and completions."""
    register: int | None = None
    events: list[tuple[int, int, int, str, int, str, object]] = []
    for order, op in enumerate(sorted(planned, key=lambda p: p.point)):
        takes_effect = not op.unknown or rng.random() < 0.5
        if op.f == "read":
            invoked, completed, kind = None, register, "ok"
        elif op.f == "write":
            invoked = completed = rng.randrange(values)
            kind = "ok"
            if takes_effect:
                register = invoked
        else:
            expected = register if rng.random() < 0.5 else rng.randrange(values)
            invoked = completed = [expected, rng.randrange(values)]
            kind = "ok" if expected == register else "fail"
            if takes_effect and expected == register:
                register = invoked[1]
        events.append((op.call, 1, order, "invoke", op.process, op.f, invoked))
        if not op.unknown:
            events.append((op.ret, 0, order, kind, op.process, op.f, completed))
    events.sort(key=lambda e: e[:3])
    return [Op(index, when, kind, process, f, value)  # type: ignore[arg-type]
            for index, (when, _, _, kind, process, f, value) in enumerate(events)]
