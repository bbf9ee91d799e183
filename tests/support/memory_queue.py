"""An in-memory queue: what a perfect broker would do, and a client of it for the
interpreter and the runner (no cluster)."""

from __future__ import annotations

import threading
import time

from workloads.core.client import completed


class MemoryLog:
    """A shared in-memory log per key: what a perfect broker would do."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.logs: dict[int, list[int]] = {}


class MemoryClient:
    """A queue client over MemoryLog; `hang` and `explode` values misbehave on purpose."""

    def __init__(self, log: MemoryLog, keys: int, opened: list | None = None) -> None:
        self.log, self.keys = log, keys
        self.opened = opened if opened is not None else []
        self.positions: dict[int, int] = {}
        self.closed = False

    def open(self, test, node):
        client = type(self)(self.log, self.keys, self.opened)
        client.positions = dict.fromkeys(range(self.keys), 0)
        self.opened.append(node)
        return client

    def setup(self, test):
        pass

    def teardown(self, test):
        pass

    def close(self, test):
        self.closed = True

    def invoke(self, test, op):
        if op["f"] == "send":
            out = []
            with self.log.lock:
                for _, key, value in op["value"]:
                    entries = self.log.logs.setdefault(key, [])
                    entries.append(value)
                    out.append(["send", key, [len(entries) - 1, value]])
            return completed(op, "ok", out)
        if op["f"] == "poll":
            reads = {}
            with self.log.lock:
                for key, position in self.positions.items():
                    entries = self.log.logs.get(key, [])
                    if position < len(entries):
                        reads[key] = [[o, entries[o]] for o in range(position, len(entries))]
                        self.positions[key] = len(entries)
            return completed(op, "ok", [["poll", reads]])
        if op["f"] == "assign":
            self.positions = {k: 0 if op.get("seek_to_beginning") else
                              self.positions.get(k, 0) for k in op["value"]}
            return completed(op, "ok", op["value"])
        if op["f"] == "crash":
            return completed(op, "info", None)
        if op["f"] == "end-offsets":
            with self.log.lock:
                return completed(op, "ok", {str(key): len(self.log.logs.get(key, []))
                                            for key in op["value"]})
        if op["f"] == "hang":
            time.sleep(2)
            return completed(op, "ok", None)
        if op["f"] == "explode":
            raise RuntimeError("boom")
        if op["f"] == "bad":
            return {**op, "type": "ok", "f": "other"}
        raise ValueError(op["f"])
