"""The availability checker: ok-send buckets per fault window, write stalls, failovers."""

from __future__ import annotations

import json
from typing import Any

from checker.cluster.availability import AvailabilityChecker, fault_windows
from checker.cluster.event_log import ControllerEvent
from checker.history import Op
from checker.registry import CHECKERS

START_MS = 1_700_000_000_000
NS = 1_000_000_000


class Timed:
    """Ops at chosen times (seconds since the start), indices dense."""

    def __init__(self) -> None:
        self.ops: list[Op] = []

    def _add(self, t: float, kind: str, process: Any, f: str, value: Any) -> None:
        self.ops.append(Op(len(self.ops), round(t * NS), kind, process, f, value))

    def send(self, t: float, key: Any, value: int, kind: str = "ok", process: int = 0) -> None:
        self._add(t, "invoke", process, "send", [["send", key, value]])
        done = [["send", key, [value, value]]] if kind == "ok" else [["send", key, value]]
        self._add(t + 0.01, kind, process, "send", done)

    def txn(self, t: float, pairs: list[tuple[Any, int]], process: int = 0) -> None:
        self._add(t, "invoke", process, "txn", [["send", k, v] for k, v in pairs] + [["poll"]])
        self._add(t + 0.01, "ok", process, "txn",
                  [["send", k, [v, v]] for k, v in pairs] + [["poll", {}]])

    def nemesis(self, t: float, f: str, value: Any = None) -> None:
        self._add(t, "info", "nemesis", f, value)


def steady(until: float, *, gap: tuple[float, float] | None = None, key: Any = 1) -> Timed:
    """An ok send to `key` every half second from 0 to `until`, none inside `gap`."""
    h = Timed()
    for tenth in range(0, round(until * 10) + 1, 5):
        t = tenth / 10
        if gap and gap[0] <= t < gap[1]:
            h.send(t, key, tenth, kind="fail")
        else:
            h.send(t, key, tenth)
    return h


def check(h: Timed, opts: dict | None = None, test: dict | None = None) -> dict:
    result = AvailabilityChecker().check(
        {"start_wall_ms": START_MS} if test is None else test, h.ops, opts or {})
    assert result.valid is True
    body = result.to_json()
    json.dumps(body, allow_nan=False)  # results.json must be able to hold it
    return body["stats"]


def test_registered_by_name() -> None:
    assert CHECKERS["availability"] is AvailabilityChecker


def test_gap_in_ok_sends_during_a_partition_window() -> None:
    # Sends every 0.5 s over 0..20 s; those in [6, 11) fail: 5 seconds without an ok send,
    # inside a partition from 5.0 s to 12.0 s.
    h = steady(20.0, gap=(6.0, 11.0))
    h.nemesis(5.0, "start-partition", {"n1": ["n2", "n3"]})
    h.nemesis(12.0, "stop-partition", "network-healed")
    h.ops.sort(key=lambda op: op.time)
    h.ops[:] = [Op(i, op.time, op.type, op.process, op.f, op.value)
                for i, op in enumerate(h.ops)]
    stats = check(h)
    # Client phase 0 .. 20.01 s: buckets 0..20.
    assert stats["overall"] == {"seconds": 21, "buckets-without-ok-send": 5,
                                "fraction": round(5 / 21, 3)}
    [window] = stats["fault-windows"]
    assert window == {"fault": "start-partition", "value": {"n1": ["n2", "n3"]},
                      "start-s": 5.0, "end-s": 12.0, "buckets": 7,
                      "buckets-without-ok-send": 5, "fraction": round(5 / 7, 3)}
    assert stats["all-faults"] == {"buckets": 7, "buckets-without-ok-send": 5,
                                   "fraction": round(5 / 7, 3)}
    assert stats["outside-faults"]["buckets-without-ok-send"] == 0
    # Last ok send before the gap completes at 5.51 s, the next at 11.01 s.
    assert stats["write-stalls"] == [{"key": 1, "seconds": 5.5, "start-s": 5.51,
                                      "end-s": 11.01, "ok-sends": 31}]
    assert stats["failovers"] == [] and stats["event-logs"] == 0


def test_no_faults_no_windows() -> None:
    stats = check(steady(4.0))
    assert stats["fault-windows"] == []
    assert stats["all-faults"] == {"buckets": 0, "buckets-without-ok-send": 0, "fraction": None}
    assert stats["overall"] == {"seconds": 5, "buckets-without-ok-send": 0, "fraction": 0.0}
    assert stats["write-stalls"][0]["seconds"] == 0.5


def test_stalls_include_the_edges_and_keys_never_written() -> None:
    h = Timed()
    h.send(0.0, "a", 1, kind="fail")
    h.txn(3.0, [("a", 2), ("b", 3)])
    h.send(9.0, "c", 4, kind="info", process=1)
    stats = check(h)
    stalls = {s["key"]: s for s in stats["write-stalls"]}
    # a and b: from the first client op (0 s) to the txn's ok at 3.01 s, then 5.99 s to the end.
    assert stalls["a"]["seconds"] == 6.0 and stalls["a"]["start-s"] == 3.01
    assert stalls["b"] == stalls["a"] | {"key": "b"}
    assert stalls["c"] == {"key": "c", "seconds": 9.01, "start-s": 0.0, "end-s": 9.01,
                           "ok-sends": 0}
    assert stats["ok-sends"] == 2
    # Only bucket 3 holds an ok send; buckets 0..9.
    assert stats["overall"]["buckets-without-ok-send"] == 9


def test_windows_pair_stops_heal_and_skip_instantaneous_faults() -> None:
    h = steady(10.0)
    for t, f in [(1.0, "kill"), (1.5, "restart"), (2.0, "pause-zookeeper"), (3.0, "start"),
                 (4.0, "start-packet-loss"), (6.0, "heal"), (7.0, "expire-session"),
                 (8.0, "pause")]:
        h.nemesis(t, f)
    h.ops.sort(key=lambda op: op.time)
    windows = [(f, start / NS, None if end is None else end / NS)
               for f, _, start, end in fault_windows(h.ops)]
    assert windows == [("kill", 1.0, 3.0), ("pause-zookeeper", 2.0, 6.0),
                       ("start-packet-loss", 4.0, 6.0), ("pause", 8.0, None)]
    stats = check(h)
    pause = stats["fault-windows"][-1]
    assert pause["end-s"] is None and pause["buckets"] == 3  # 8, 9, 10: to the end


def event(ms: int, name: str, **fields: Any) -> ControllerEvent:
    return ControllerEvent(time=START_MS + ms, event=name, node="n1", controller_id=1,
                           controller_epoch=2, **fields)


def test_failover_from_the_event_log() -> None:
    tp = {"topic": "kchaos", "partition": 1}
    events = [
        event(100, "elect-leader", **tp, selector="offline", old_leader=-1, new_leader=1,
              leader_epoch=0),
        # Broker 1 dies: the controller sees it at 5.0 s and elects 2 at 5.25 s.
        event(5_000, "broker-change"),
        event(5_250, "elect-leader", **tp, selector="offline", old_leader=1, new_leader=2,
              leader_epoch=1),
        # Broker 2 dies with no live ISR member: offline at 8 s, 3 elected at 11.5 s.
        event(7_990, "broker-change"),
        event(8_000, "leader-offline", **tp, old_leader=2, new_leader=-1, leader_epoch=2),
        event(11_400, "broker-change"),
        event(11_500, "elect-leader", **tp, selector="offline", old_leader=-1, new_leader=3,
              leader_epoch=3, unclean=True),
        # A preferred election hands over at once.
        event(15_000, "elect-leader", **tp, selector="preferred", old_leader=3, new_leader=1,
              leader_epoch=4),
    ]
    stats = check(steady(16.0), {"controller_events": events})
    assert stats["event-logs"] == 1
    got = [(f["new-leader"], f["from"], f["seconds"], f["at-s"]) for f in stats["failovers"]]
    assert got == [(1, None, None, 0.1), (2, "broker-change", 0.25, 5.25),
                   (3, "leader-offline", 3.5, 11.5), (1, "planned", 0.0, 15.0)]
    assert stats["failovers"][2]["unclean"] is True


def test_failover_of_a_leader_that_was_the_controller_starts_at_the_new_controller() -> None:
    tp = {"topic": "kchaos", "partition": 0}
    events = [
        event(100, "broker-change"),
        event(200, "elect-leader", **tp, selector="offline", old_leader=-1, new_leader=3,
              leader_epoch=0),
        # Broker 3, leader and controller, dies: broker 2 takes office at 26.5 s and elects.
        event(26_530, "become-controller"),
        event(26_560, "elect-leader", **tp, selector="offline", old_leader=3, new_leader=4,
              leader_epoch=1),
    ]
    stats = check(steady(30.0), {"controller_events": events})
    moved = stats["failovers"][-1]
    assert (moved["from"], moved["seconds"]) == ("become-controller", 0.03)


def test_failover_without_a_marker_is_bounded_by_the_previous_change(tmp_path) -> None:
    lines = [
        {"time": START_MS + 1_000, "event": "elect-leader", "topic": "kchaos", "partition": 0,
         "selector": "offline", "old_leader": -1, "new_leader": 1, "leader_epoch": 0},
        {"time": START_MS + 4_000, "event": "elect-leader", "topic": "kchaos", "partition": 0,
         "selector": "offline", "old_leader": -1, "new_leader": 2, "leader_epoch": 2},
    ]
    log = tmp_path / "nodes" / "n1" / "controller-events.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    stats = check(steady(5.0), {"store_dir": str(tmp_path)}, test={})
    assert stats["event-logs"] == 1 and stats["torn-event-lines"] == 0
    last = stats["failovers"][-1]
    assert (last["from"], last["seconds"], last["at-s"]) == ("previous-leader-change", 3.0, None)


def test_unreadable_log_and_empty_history_still_measure(tmp_path) -> None:
    log = tmp_path / "events.jsonl"
    log.write_text("not json\n")
    stats = check(Timed(), {"event_logs": [str(log)]})
    assert stats["client-ops"] == 0 and "nothing to measure" in stats["note"]
    assert stats["failovers"] == [] and "event-log-error" in stats


def test_the_final_reads_after_the_time_limit_are_no_stall() -> None:
    h = steady(10.0, key="a")
    h.send(10.0, "b", 99)
    for t in (12.0, 15.0, 20.7):
        h._add(t, "invoke", 1, "poll", [["poll"]])
        h._add(t + 0.5, "ok", 1, "poll", [["poll", {}]])
    stats = check(h, test={"start_wall_ms": START_MS, "time_limit": 10})
    assert stats["overall"]["seconds"] == 11
    stalls = {s["key"]: s for s in stats["write-stalls"]}
    assert stalls["a"]["seconds"] <= 0.5 and stalls["a"]["end-s"] <= 10.0
    assert stalls["b"]["end-s"] == 10.0
    whole = check(h)
    assert {s["key"]: s for s in whole["write-stalls"]}["a"]["end-s"] == 21.2
