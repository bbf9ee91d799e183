"""Subscribe-mode histories built by hand, in the shape of the groups history contract."""

from __future__ import annotations

from typing import Any

from checker.history import Op

MS = 1_000_000
SECOND = 1_000_000_000


class GroupBuilder:
    """Builds a consumer-group history op by op; every client op carries the group.

    The clock advances 1 ms per line; `at(seconds)` moves it forward. Rebalance entries
    (`assigned`, `revoked`) take the clock's time unless given one, and ride on the
    completion of the op they are passed to.
    """

    def __init__(self, group: str = "g0") -> None:
        self.ops: list[Op] = []
        self.time = 0
        self.group = group

    def at(self, seconds: float) -> GroupBuilder:
        self.time = max(self.time, int(seconds * SECOND))
        return self

    def _line(self, kind: str, process: Any, f: str, value: Any, extra: dict) -> int:
        self.time += MS
        self.ops.append(Op(len(self.ops), self.time, kind, process, f, value, extra))
        return len(self.ops) - 1

    def invoke(self, process: Any, f: str, value: Any, group: str | None = None) -> int:
        return self._line("invoke", process, f, value, {"group": group or self.group})

    def complete(self, process: Any, f: str, kind: str, value: Any, group: str | None = None,
                 **extra: Any) -> int:
        return self._line(kind, process, f, value, {"group": group or self.group, **extra})

    def op(self, process: Any, f: str, invoked: Any, kind: str, completed: Any,
           group: str | None = None, **extra: Any) -> int:
        """Invoke and complete one op; returns the completion's index."""
        self.invoke(process, f, invoked, group)
        return self.complete(process, f, kind, completed, group, **extra)

    def entry(self, keys: list[Any], generation: int | None, member: str | None,
              revoke: bool = False, lost: bool = False, at: float | None = None
              ) -> dict[str, Any]:
        when = self.time + MS // 2 if at is None else int(at * SECOND)
        return {"time": when, "group": self.group, "generation": generation, "member": member,
                "assigned": [] if revoke else keys, "revoked": keys if revoke else [],
                "lost": lost}

    def subscribe(self, process: Any, rebalances: list[dict] | None = None) -> int:
        extra = {"rebalances": rebalances} if rebalances else {}
        value = {"group": self.group}
        return self.op(process, "subscribe", value, "ok", value, **extra)

    def poll(self, process: Any, reads: dict[Any, list[tuple[int, int]]] | None = None,
             rebalances: list[dict] | None = None, kind: str = "ok", **extra: Any) -> int:
        result = {str(k): [[o, v] for o, v in pairs] for k, pairs in (reads or {}).items()}
        if rebalances:
            extra["rebalances"] = rebalances
        return self.op(process, "poll", [["poll"]], kind, [["poll", result]], **extra)

    def commit(self, process: Any, offsets: dict[Any, int], kind: str = "ok") -> int:
        value = {str(k): n for k, n in offsets.items()}
        return self.op(process, "commit", value, kind, value)

    def send(self, process: Any, key: Any, value: int, offset: int | None = None,
             kind: str = "ok") -> int:
        done = [["send", key, [offset, value]]] if kind == "ok" else [["send", key, value]]
        return self.op(process, "send", [["send", key, value]], kind, done)

    def crash(self, process: Any, how: str = "abandon",
              rebalances: list[dict] | None = None) -> int:
        extra = {"rebalances": rebalances} if rebalances else {}
        return self.op(process, "crash", how, "info", how, **extra)

    def committed(self, process: Any, offsets: dict[Any, int | None]) -> int:
        value = {"group": self.group, "offsets": {str(k): n for k, n in offsets.items()}}
        return self.op(process, "committed", {"group": self.group}, "ok", value)

    def nemesis(self, f: str, value: Any) -> int:
        return self._line("info", "nemesis", f, value, {})

    def assign_mode_poll(self, process: Any, reads: dict[Any, list[tuple[int, int]]]) -> int:
        """A poll by a process of no group (an assign-mode final read)."""
        result = {str(k): [[o, v] for o, v in pairs] for k, pairs in reads.items()}
        self.time += MS
        self.ops.append(Op(len(self.ops), self.time, "invoke", process, "poll", [["poll"]], {}))
        self.time += MS
        self.ops.append(Op(len(self.ops), self.time, "ok", process, "poll",
                           [["poll", result]], {}))
        return len(self.ops) - 1
