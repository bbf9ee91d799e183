"""Clock faults: a node's wall clock moved while its monotonic clock, which timeouts use,
runs on (`harness.control.clocks` on the local backend).

- `clock-bump` with value `{"seconds": s}`: one random node's clock jumps by `s` (negative:
  back) and stays there; the completion says `{"node": n, "offset_ms": ms}`.
- `clock-strobe` with value `{"seconds": s, "period_ms": p, "duration": d}`: one random
  node's clock flips between the real time and `s` ahead every `p` ms for `d` seconds
  (the op lasts that long), ending on the real time: `{"node": n, "flips": k, ...}`.
- `clock-reset`: every node back on the real time: `{"reset": [nodes that were off]}`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

from nemesis.base import BaseNemesis, completed
from nemesis.capabilities import ClockControl, Nodes

__all__ = ["ClockNemesis", "reset_clocks"]


class ClockNemesis(BaseNemesis):
    """Moves node clocks; see the module docstring."""

    fs = frozenset({"clock-bump", "clock-strobe", "clock-reset"})

    def __init__(self, rng: random.Random,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.rng = rng
        self.sleep = sleep

    def teardown(self, cluster: Nodes) -> None:
        if isinstance(cluster, ClockControl):
            reset_clocks(cluster)

    def invoke(self, cluster: ClockControl, op: dict) -> dict:
        if not isinstance(cluster, ClockControl):
            raise TypeError(f"{type(cluster).__name__} has no node clocks to move")
        clocks = cluster
        if op["f"] == "clock-reset":
            return completed(op, {"reset": reset_clocks(clocks)})
        value = op.get("value") or {}
        node = self.rng.choice(list(clocks.nodes))
        offset_ms = int(float(value.get("seconds", 60)) * 1000)
        if op["f"] == "clock-bump":
            clocks.set_clock_offset(node, clocks.clock_offset(node) + offset_ms)
            return completed(op, {"node": node, "offset_ms": clocks.clock_offset(node)})
        period = max(int(value.get("period_ms", 200)), 50) / 1000
        deadline = time.monotonic() + float(value.get("duration", 3.0))
        flips = 0
        while time.monotonic() < deadline:
            clocks.set_clock_offset(node, offset_ms if flips % 2 == 0 else 0)
            flips += 1
            self.sleep(period)
        clocks.set_clock_offset(node, 0)
        return completed(op, {"node": node, "flips": flips, "offset_ms": offset_ms,
                              "period_ms": int(period * 1000)})


def reset_clocks(clocks: ClockControl) -> list[str]:
    """Every node back on the real time; the nodes whose clock was off."""
    moved = [node for node in clocks.nodes if clocks.clock_offset(node)]
    for node in clocks.nodes:
        clocks.set_clock_offset(node, 0)
    return moved
