"""Queue histories built by hand or simulated, and anomalies injected into them."""

from __future__ import annotations

import random
from typing import Any

from checker.history import Op


class Builder:
    """Builds a history op by op: each client op is an invoke and its completion."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.time = 0

    def _line(self, kind: str, process: Any, f: str, value: Any, extra: dict) -> int:
        self.time += 1_000_000
        self.ops.append(Op(len(self.ops), self.time, kind, process, f, value, extra))
        return len(self.ops) - 1

    def op(self, process: Any, f: str, invoked: Any, kind: str, completed: Any,
           **extra: Any) -> int:
        """Invoke and complete one op; returns the completion's index."""
        self._line("invoke", process, f, invoked, {})
        return self._line(kind, process, f, completed, extra)

    def invoke(self, process: Any, f: str, value: Any) -> int:
        return self._line("invoke", process, f, value, {})

    def complete(self, process: Any, f: str, kind: str, value: Any, **extra: Any) -> int:
        """The completion of an op invoked earlier with `invoke` (ops may overlap)."""
        return self._line(kind, process, f, value, extra)

    def send(self, process: Any, key: Any, value: int, offset: int | None = None,
             kind: str = "ok", **extra: Any) -> int:
        done = [["send", key, [offset, value]]] if kind == "ok" else [["send", key, value]]
        return self.op(process, "send", [["send", key, value]], kind, done, **extra)

    def sends(self, process: Any, pairs: list[tuple[Any, int, int]], kind: str = "ok") -> int:
        """One op of several sends: (key, value, offset) each."""
        invoked = [["send", k, v] for k, v, _ in pairs]
        done = [["send", k, [o, v]] for k, v, o in pairs] if kind == "ok" else invoked
        return self.op(process, "txn" if len(pairs) > 1 else "send", invoked, kind, done)

    def poll(self, process: Any, reads: dict[Any, list[tuple[int, int]]]) -> int:
        result = {str(k): [[o, v] for o, v in pairs] for k, pairs in reads.items()}
        return self.op(process, "poll", [["poll"]], "ok", [["poll", result]])

    def assign(self, process: Any, keys: list[Any], f: str = "assign",
               seek_to_beginning: bool = False) -> int:
        extra = {"seek_to_beginning": True} if seek_to_beginning else {}
        return self.op(process, f, keys, "ok", keys, **extra)

    def end_offsets(self, process: Any, ends: dict[Any, int], kind: str = "ok") -> int:
        """The final drain's question to the broker: each key's end offset."""
        done = {str(k): end for k, end in ends.items()} if kind == "ok" else list(ends)
        return self.op(process, "end-offsets", list(ends), kind, done)

    def nemesis(self, f: str, value: Any) -> int:
        return self._line("info", "nemesis", f, value, {})


def simulate(seed: int, steps: int, keys: int = 3, processes: int = 4) -> Builder:
    """A valid queue history: sends append to per-key logs, pollers read forward from
    where they were (an assign keeps the positions of the keys it lists; one that seeks
    to the beginning, or that drops a key, lets the next poll of it start anywhere at or
    before where it was; a worker whose send was info goes on as a new process, which
    polls from where it was), then every key is drained from the beginning."""
    rng = random.Random(seed)
    logs: list[list[int]] = [[] for _ in range(keys)]
    positions = [[0] * keys for _ in range(processes)]
    b = Builder()
    value = 0
    ids = list(range(processes))
    for _ in range(steps):
        worker, key = rng.randrange(processes), rng.randrange(keys)
        process = ids[worker]
        choice = rng.random()
        if choice < 0.45:
            value += 1
            fate = rng.random()
            if fate < 0.1:
                b.send(process, key, value, kind="fail")
            elif fate < 0.2:
                if rng.random() < 0.5:
                    logs[key].append(value)
                b.send(process, key, value, kind="info")
                ids[worker] += processes
            else:
                logs[key].append(value)
                b.send(process, key, value, len(logs[key]) - 1, acks="all")
        elif choice < 0.9:
            start = positions[worker][key]
            end = min(len(logs[key]), start + rng.randrange(0, 4))
            b.poll(process, {key: [(o, logs[key][o]) for o in range(start, end)]})
            positions[worker][key] = max(start, end)
        else:
            kept = [k for k in range(keys) if rng.random() < 0.6]
            seek = rng.random() < 0.5
            b.assign(process, kept, seek_to_beginning=seek)
            positions[worker] = [p if k in kept and not seek else rng.randrange(0, p + 1)
                                 for k, p in enumerate(positions[worker])]
        if rng.random() < 0.05:
            b.nemesis("start-partition", {"n1": ["n2"]})
    drainer = "drainer"
    for key, log in enumerate(logs):
        b.poll(drainer, {key: list(enumerate(log))})
    return b


INJECTIONS = ("lost-write", "unseen", "duplicate", "inconsistent-offsets", "G1a",
              "poll-skip", "nonmonotonic-poll", "int-poll-skip", "int-nonmonotonic-poll",
              "nonmonotonic-send")


def inject(b: Builder, kind: str, key: str = "x") -> None:
    """Append, on a fresh key, a minimal pattern showing `kind` (and what it implies)."""
    p, q = "p-" + kind, "q-" + kind
    if kind == "lost-write":
        b.send(p, key, 1001, 0)
        b.send(p, key, 1002, 1)
        b.poll(q, {key: [(1, 1002)]})
    elif kind == "unseen":
        b.send(p, key, 1001, 0)
        b.send(p, key, 1002, 1)
        b.poll(q, {key: [(0, 1001)]})
    elif kind == "duplicate":
        b.send(p, key, 1001, 0)
        b.poll(q, {key: [(0, 1001), (1, 1001)]})
    elif kind == "inconsistent-offsets":
        b.send(p, key, 1001, 0)
        b.send(p, key, 1002, 0)
        b.poll(q, {key: [(0, 1001)]})
    elif kind == "G1a":
        b.send(p, key, 1001, kind="fail")
        b.poll(q, {key: [(0, 1001)]})
    elif kind in ("poll-skip", "nonmonotonic-poll"):
        for offset in range(3):
            b.send(p, key, 1001 + offset, offset)
        b.poll(q, {key: [(0, 1001)]} if kind == "poll-skip" else {key: [(0, 1001), (1, 1002)]})
        b.poll(q, {key: [(2, 1003)]} if kind == "poll-skip" else {key: [(1, 1002), (2, 1003)]})
        b.poll("r-" + kind, {key: [(0, 1001), (1, 1002), (2, 1003)]})
    elif kind in ("int-poll-skip", "int-nonmonotonic-poll"):
        for offset in range(3):
            b.send(p, key, 1001 + offset, offset)
        b.poll(q, {key: [(0, 1001), (2, 1003)]} if kind == "int-poll-skip"
               else {key: [(1, 1002), (0, 1001), (2, 1003)]})
        b.poll("r-" + kind, {key: [(0, 1001), (1, 1002), (2, 1003)]})
    elif kind == "nonmonotonic-send":
        b.send(p, key, 1001, 1)
        b.send(p, key, 1002, 0)
        b.poll(q, {key: [(0, 1002), (1, 1001)]})


def simulate_txns(seed: int, steps: int, keys: int = 3, processes: int = 4) -> Builder:
    """A valid transactional history: transactions run one at a time, each sending to a
    few keys and polling forward from where its process was; some abort (fail: nothing
    sent is kept, the poll position does not move) and some crash after committing
    (info, then the worker goes on as a new process that polls from the start). Every key
    is drained at the end."""
    rng = random.Random(seed)
    logs: list[list[int]] = [[] for _ in range(keys)]
    positions: dict[Any, list[int]] = {}
    b = Builder()
    value = 0
    ids = list(range(processes))
    for _ in range(steps):
        worker = rng.randrange(processes)
        process = ids[worker]
        at = positions.setdefault(process, [0] * keys)
        invoked, done, moved = [], [], list(at)
        appended: list[tuple[int, int]] = []
        for _ in range(rng.randrange(1, 4)):
            key = rng.randrange(keys)
            if rng.random() < 0.5:
                value += 1
                invoked.append(["send", key, value])
                appended.append((key, value))
                done.append(["send", key, [len(logs[key]) + sum(
                    1 for k, _ in appended[:-1] if k == key), value]])
            else:
                end = min(len(logs[key]), moved[key] + rng.randrange(0, 3))
                records = [[o, logs[key][o]] for o in range(moved[key], end)]
                invoked.append(["poll"])
                done.append(["poll", {str(key): records}])
                moved[key] = max(moved[key], end)
        fate = rng.random()
        kind = "fail" if fate < 0.1 else "info" if fate < 0.2 else "ok"
        if kind != "fail":
            for key, sent in appended:
                logs[key].append(sent)
            positions[process] = moved
        b.op(process, "txn", invoked, kind, done if kind != "fail" else invoked)
        if kind == "info":
            ids[worker] += processes
    for key, log in enumerate(logs):
        b.poll("drainer", {key: list(enumerate(log))})
    return b


TXN_INJECTIONS = ("G0", "G1c", "G1b", "precommitted-read", "int-nonmonotonic-send")


def inject_txn(b: Builder, kind: str, keys: tuple[str, str] = ("tx", "ty")) -> None:
    """Append, on fresh keys, two or three transactions showing `kind`."""
    x, y = keys
    p, q = "p-" + kind, "q-" + kind
    if kind == "G0":
        b.invoke(p, "txn", [["send", x, 2001], ["send", y, 2001]])
        b.invoke(q, "txn", [["send", x, 2002], ["send", y, 2002]])
        b.complete(p, "txn", "ok", [["send", x, [0, 2001]], ["send", y, [1, 2001]]])
        b.complete(q, "txn", "ok", [["send", x, [1, 2002]], ["send", y, [0, 2002]]])
        b.poll("r-" + kind, {x: [(0, 2001), (1, 2002)], y: [(0, 2002), (1, 2001)]})
    elif kind == "G1c":
        b.invoke(p, "txn", [["send", x, 2001], ["poll"]])
        b.invoke(q, "txn", [["send", y, 2002], ["poll"]])
        b.complete(p, "txn", "ok", [["send", x, [0, 2001]], ["poll", {y: [[0, 2002]]}]])
        b.complete(q, "txn", "ok", [["send", y, [0, 2002]], ["poll", {x: [[0, 2001]]}]])
    elif kind == "G1b":
        b.op(p, "txn", [["send", x, 2001], ["send", x, 2002]], "ok",
             [["send", x, [0, 2001]], ["send", x, [1, 2002]]])
        b.poll(q, {x: [(0, 2001)]})
        b.poll("r-" + kind, {x: [(0, 2001), (1, 2002)]})
    elif kind == "precommitted-read":
        b.op(p, "txn", [["send", x, 2001], ["poll"]], "ok",
             [["send", x, [0, 2001]], ["poll", {x: [[0, 2001]]}]])
    elif kind == "int-nonmonotonic-send":
        b.op(p, "txn", [["send", x, 2001], ["send", x, 2002]], "ok",
             [["send", x, [1, 2001]], ["send", x, [0, 2002]]])
        b.poll(q, {x: [(0, 2002), (1, 2001)]})
