"""Valid queue histories whose ops interleave (an invoke and its completion far apart),
and malformed copies of them, each breaking one history rule."""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

Line = dict[str, Any]


def interleaved(seed: int, steps: int, processes: int = 5) -> list[Line]:
    """JSON objects of a valid history: each step opens or completes one process's op."""
    rng = random.Random(seed)
    ops: list[Line] = []
    ids = list(range(processes))
    open_ops: dict[int, Line] = {}
    offsets: dict[int, int] = {}
    value = 0

    def add(kind: str, process: Any, f: str, val: Any) -> None:
        ops.append({"index": len(ops), "time": 1000 * (len(ops) + 1), "type": kind,
                    "process": process, "f": f, "value": val})

    for _ in range(steps):
        if rng.random() < 0.05:
            add("info", "nemesis", "start-partition", {"n1": ["n2"]})
            continue
        worker = rng.randrange(processes)
        process = ids[worker]
        invoke = open_ops.pop(process, None)
        if invoke is None:
            if rng.random() < 0.5:
                value += 1
                key = rng.randrange(3)
                invoke = {"f": "send", "value": [["send", key, value]]}
            else:
                invoke = {"f": "poll", "value": [["poll"]]}
            open_ops[process] = invoke
            add("invoke", process, invoke["f"], invoke["value"])
            continue
        kind = rng.choices(["ok", "fail", "info"], [0.8, 0.1, 0.1])[0]
        done = invoke["value"]
        if invoke["f"] == "send" and kind == "ok":
            _, key, sent = done[0]
            offsets[key] = offsets.get(key, -1) + 1
            done = [["send", key, [offsets[key], sent]]]
        elif invoke["f"] == "poll" and kind == "ok":
            done = [["poll", {}]]
        add(kind, process, invoke["f"], done)
        if kind == "info":
            ids[worker] += processes
    return ops


def _pairs(ops: list[Line]) -> list[tuple[int, int]]:
    """(invoke position, completion position) of every completed client op."""
    opened: dict[Any, int] = {}
    pairs = []
    for position, op in enumerate(ops):
        if op["process"] == "nemesis":
            continue
        if op["type"] == "invoke":
            opened[op["process"]] = position
        else:
            pairs.append((opened.pop(op["process"]), position))
    return pairs


def _widest(ops: list[Line], kind: str | None = None) -> tuple[int, int]:
    """The completed op whose invoke and completion are furthest apart."""
    pairs = [(i, j) for i, j in _pairs(ops) if kind is None or ops[j]["type"] == kind]
    return max(pairs, key=lambda pair: (pair[1] - pair[0], -pair[0]))


def index_gap(ops: list[Line]) -> None:
    ops[len(ops) // 2]["index"] += 1


def f_differs(ops: list[Line]) -> None:
    _, j = _widest(ops, "fail")
    ops[j]["f"] = "poll" if ops[j]["f"] == "send" else "send"


def invoke_twice(ops: list[Line]) -> None:
    _, j = _widest(ops, "fail")
    ops[j]["type"] = "invoke"


def completion_without_invoke(ops: list[Line]) -> None:
    i, _ = _widest(ops)
    ops[i]["process"] = 10_000


def completion_before_invoke(ops: list[Line]) -> None:
    i, j = _widest(ops)
    ops[j]["time"] = ops[i]["time"] - 1


def invoke_after_info(ops: list[Line]) -> None:
    _, crash = min(_pairs(ops), key=lambda pair: (ops[pair[1]]["type"] != "info", pair[1]))
    assert ops[crash]["type"] == "info"
    i, j = next((i, j) for i, j in _pairs(ops) if i > crash + 5)
    ops[i]["process"] = ops[j]["process"] = ops[crash]["process"]


def nemesis_ok(ops: list[Line]) -> None:
    last = max(p for p, op in enumerate(ops) if op["process"] == "nemesis")
    ops[last]["type"] = "ok"


def bad_micro_op(ops: list[Line]) -> None:
    i, _ = _widest(ops)
    ops[i]["value"] = [["sned", 1, 2]]


def f_differs_and_bad_micro_op(ops: list[Line]) -> None:
    """Two violations on one line: the history rule is reported, as read_history would."""
    _, j = _widest(ops, "fail")
    ops[j]["f"] = "poll" if ops[j]["f"] == "send" else "send"
    ops[j]["value"] = [["sned", 1, 2]]


MUTATIONS: dict[str, Callable[[list[Line]], None]] = {
    "index gap": index_gap,
    "f differs": f_differs,
    "invoke twice": invoke_twice,
    "completion without invoke": completion_without_invoke,
    "completion before invoke": completion_before_invoke,
    "invoke after info": invoke_after_info,
    "nemesis ok": nemesis_ok,
    "bad micro-op": bad_micro_op,
    "f differs and bad micro-op": f_differs_and_bad_micro_op,
}
RAW_MUTATIONS = {
    "invalid JSON": '{"index": 7, "time": ',
    "unknown type": '{"index": 7, "time": 1, "type": "okay", "process": 0, "f": "poll"}',
}


def write_history(path: Path, ops: list[Line], *, blank_every: int = 0,
                  raw: dict[int, str] | None = None) -> Path:
    """Write ops one per line; `raw` replaces lines by position; blank lines optional."""
    lines = []
    for position, op in enumerate(ops):
        lines.append((raw or {}).get(position, json.dumps(op)))
        if blank_every and position % blank_every == blank_every - 1:
            lines.append("   ")
    path.write_text("\n".join(lines) + "\n")
    return path


def malformed(path: Path, name: str, seed: int = 3, steps: int = 160) -> Path:
    """A malformed copy of an interleaved history, broken by mutation `name`."""
    ops = interleaved(seed, steps)
    if name in RAW_MUTATIONS:
        return write_history(path, ops, raw={len(ops) * 2 // 3: RAW_MUTATIONS[name]},
                             blank_every=9)
    MUTATIONS[name](ops)
    return write_history(path, ops, blank_every=9)


MALFORMED = sorted([*MUTATIONS, *RAW_MUTATIONS])
