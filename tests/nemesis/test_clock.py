"""The clock faults' plan and heal, against node clocks kept in memory (no process is
crossed: the library itself is tested on real processes in tests/harness/test_clocks.py)."""

from __future__ import annotations

import random

import pytest

from harness.config import ConfigError, load_config
from harness.test import build_test
from nemesis.capabilities import ClockControl
from nemesis.clock import ClockNemesis
from nemesis.package import FAULTS, GROUPS, package


class Clocks:
    nodes = ("n1", "n2", "n3")
    brokers = ("n1", "n2", "n3")
    bootstrap_servers = "n1:9092"

    def __init__(self) -> None:
        self.offsets: dict[str, int] = {}
        self.history: list[tuple[str, int]] = []

    def set_clock_offset(self, node: str, milliseconds: int) -> None:
        self.offsets[node] = milliseconds
        self.history.append((node, milliseconds))

    def clock_offset(self, node: str) -> int:
        return self.offsets.get(node, 0)

    def broker_id(self, node: str) -> int:
        return int(node[1:])

    def broker_node(self, broker_id: int) -> str:
        return f"n{broker_id}"


def op(f, value=None):
    return {"type": "info", "process": "nemesis", "f": f, "value": value}


def test_a_bump_moves_one_node_and_a_second_bump_adds_to_it():
    clocks = Clocks()
    assert isinstance(clocks, ClockControl)
    nemesis = ClockNemesis(random.Random(1))
    done = nemesis.invoke(clocks, op("clock-bump", {"seconds": 600}))
    node = done["value"]["node"]
    assert done["value"] == {"node": node, "offset_ms": 600_000}
    assert clocks.offsets == {node: 600_000}
    nemesis = ClockNemesis(random.Random(1))
    again = nemesis.invoke(clocks, op("clock-bump", {"seconds": -60}))
    assert again["value"] == {"node": node, "offset_ms": 540_000}
    reset = nemesis.invoke(clocks, op("clock-reset"))
    assert reset["value"] == {"reset": [node]} and not any(clocks.offsets.values())


def test_a_strobe_flips_one_clock_for_its_duration_and_ends_on_the_real_time():
    clocks = Clocks()
    slept = []
    nemesis = ClockNemesis(random.Random(2), sleep=slept.append)
    done = nemesis.invoke(clocks, op("clock-strobe", {"seconds": 30, "period_ms": 100,
                                                      "duration": 0.05}))
    node = done["value"]["node"]
    assert done["value"]["flips"] >= 1 and done["value"]["period_ms"] == 100
    assert {n for n, _ in clocks.history} == {node}
    assert clocks.history[0] == (node, 30_000) and clocks.history[-1] == (node, 0)
    assert all(seconds == 0.1 for seconds in slept)


def test_heal_and_teardown_put_every_clock_back():
    clocks = Clocks()
    clocks.set_clock_offset("n2", 7_200_000)
    pack = package("clock-bump", seed=3, time_limit=30)
    pack.nemesis.invoke(clocks, op("heal"))
    assert not any(clocks.offsets.values())
    clocks.set_clock_offset("n3", -600_000)
    ClockNemesis(random.Random(0)).teardown(clocks)
    assert not any(clocks.offsets.values())


def test_clock_faults_need_movable_clocks_and_stay_out_of_all():
    assert FAULTS["clock-bump"].stop == FAULTS["clock-strobe"].stop == "clock-reset"
    assert all(ClockControl in FAULTS[name].needs for name in ("clock-bump", "clock-strobe"))
    assert not {"clock-bump", "clock-strobe"} & set(GROUPS["all"])


def test_a_run_asking_a_clock_fault_gets_movable_clocks_and_others_do_not():
    clocked = build_test(load_config(None, {"nemesis": "clock-bump"}))
    assert clocked.db.spec.options == {"offset_clocks": True}
    assert ClockControl in clocked.db.offer().has
    plain = build_test(load_config(None, {"nemesis": "kill"}))
    assert plain.db.spec.options == {} and ClockControl not in plain.db.offer().has
    with pytest.raises(ConfigError, match="--nemesis clock-bump needs node clocks it can "
                                          "move; --db kchaos on --backend ssh has none"):
        build_test(load_config(None, {"nemesis": "clock-bump", "backend": "ssh",
                                      "inventory": "/nonexistent.toml"}))
