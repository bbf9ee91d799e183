"""Recorded schedules (nemesis.schedule): extraction from a history, episodes, shortening,
and the schedule file."""

from __future__ import annotations

import json

import pytest

from nemesis.schedule import (
    Episode,
    ScheduleError,
    ScheduleFile,
    TimedOp,
    cut_time_limit,
    episodes,
    halve_holds,
    invocations,
    ops_of,
    read_schedule,
    recorded_schedule,
    write_schedule,
)

S = 1_000_000_000


def nemesis(time, f, value, **extra):
    return {"time": int(time * S), "type": "info", "process": "nemesis", "f": f,
            "value": value, **extra}


def client(time, type_, f="send", value=None):
    return {"time": int(time * S), "type": type_, "process": 0, "f": f, "value": value}


# A run of `--nemesis kill-leader,partition-one --time-limit 20`: each nemesis op is recorded
# when invoked (the role) and when done (the nodes); the last scheduled stop was clamped to
# the time limit and invoked just after it; then the final phase (the stops, heal).
HISTORY = [
    client(0.1, "invoke"), client(0.2, "ok"),
    nemesis(3.0, "kill", "leader"), nemesis(3.2, "kill", {"n2": "killed"}),
    client(3.5, "invoke"),
    nemesis(5.0, "start", None), nemesis(5.1, "start", {"n2": "started"}),
    client(5.5, "info"),
    nemesis(9.0, "start-partition", "one"),
    nemesis(9.1, "start-partition", {"n1": ["n3"], "n3": ["n1"]}),
    nemesis(12.0, "restart", "controller"), nemesis(12.5, "restart", {"n1": "restarted"}),
    nemesis(20.0003, "stop-partition", None), nemesis(20.001, "stop-partition", "network-healed"),
    nemesis(21.0, "stop-partition", None), nemesis(21.0, "stop-partition", "network-healed"),
    nemesis(21.1, "start", None), nemesis(21.1, "start", "not-started"),
    nemesis(21.2, "heal", None), nemesis(21.3, "heal", {"healed": True, "started": []}),
    client(32.0, "invoke", "poll"), client(33.0, "ok", "poll"),
]
FINAL = ["stop-partition", "start", "heal"]


def test_invocations_are_the_first_of_each_pair_of_nemesis_ops():
    invoked = invocations(HISTORY)
    assert [(op["f"], op["value"]) for op in invoked][:4] == [
        ("kill", "leader"), ("start", None), ("start-partition", "one"),
        ("restart", "controller")]
    assert len(invoked) == 8


def test_the_schedule_is_the_invocations_before_the_final_phase_with_their_roles():
    ops = recorded_schedule(HISTORY, FINAL, time_limit=20.0)
    assert ops == [TimedOp(3.0, "kill", "leader"), TimedOp(5.0, "start", None),
                   TimedOp(9.0, "start-partition", "one"),
                   TimedOp(12.0, "restart", "controller"),
                   TimedOp(20.0003, "stop-partition", None)]


def test_a_run_cut_short_in_its_final_phase_keeps_its_scheduled_ops():
    cut = HISTORY[:16]  # ... the clamped stop, then the final phase's first stop
    ops = recorded_schedule(cut, FINAL, time_limit=20.0)
    assert [op.f for op in ops] == ["kill", "start", "start-partition", "restart",
                                    "stop-partition"]
    assert recorded_schedule(HISTORY[:12], FINAL, time_limit=20.0)[-1].f == "restart"


def test_a_history_without_faults_has_an_empty_schedule():
    history = [client(0.1, "invoke"), client(0.2, "ok"), nemesis(21.2, "heal", None),
               nemesis(21.3, "heal", {"healed": True})]
    assert recorded_schedule(history, ["heal"], 20.0) == []


def test_episodes_pair_each_start_with_the_next_stop_of_its_kind():
    ops = [TimedOp(3, "start-partition", "leader-from-followers"),
           TimedOp(12, "expire-session", {"target": "leader"}),
           TimedOp(20, "stop-partition"),
           TimedOp(22, "kill", "leader"), TimedOp(23, "pause", "one"),
           TimedOp(24, "start"), TimedOp(25, "resume"),
           TimedOp(26, "resume")]
    found = episodes(ops)
    assert [(e.start.f, e.stop and e.stop.f) for e in found] == [
        ("start-partition", "stop-partition"), ("expire-session", None), ("kill", "start"),
        ("pause", "resume"), ("resume", None)]
    assert found[0].hold == 17 and found[1].hold is None
    assert ops_of(found) == ops
    assert ops_of([found[2], found[0]]) == [ops[0], ops[2], ops[3], ops[5]]


def test_overlapping_faults_of_one_kind_pair_first_in_first_out():
    ops = [TimedOp(1, "kill", "one"), TimedOp(2, "kill", "one"), TimedOp(3, "start"),
           TimedOp(4, "start")]
    assert [(e.start.seconds, e.stop.seconds) for e in episodes(ops)] == [(1, 3), (2, 4)]


def test_cut_time_limit_keeps_a_margin_after_the_last_op():
    ops = [TimedOp(3, "kill", "one"), TimedOp(11.5, "start")]
    assert cut_time_limit(ops, 60, 5) == 17.0
    assert cut_time_limit(ops, 14, 5) == 14


def test_halve_holds_moves_stops_earlier_down_to_a_minimum():
    chosen = [Episode(TimedOp(2, "kill", "one"), TimedOp(10, "start")),
              Episode(TimedOp(12, "restart", "one")),
              Episode(TimedOp(14, "pause", "one"), TimedOp(15.5, "resume"))]
    halved = halve_holds(chosen, min_hold=1.0)
    assert [e.hold for e in halved] == [4, None, 1.5]
    assert halved[0].stop == TimedOp(6, "start")
    assert halve_holds(chosen, [2], min_hold=1.0) is None  # 0.75 s would be below 1 s
    assert [e.hold for e in halve_holds(chosen, [0])] == [4, None, 1.5]


def schedule(**changes):
    data = {"format": "kchaos-schedule", "version": 1,
            "source": {"run": "store/queue/20260101T000000", "anomalies": ["lost-write"]},
            "seed": 7, "time_limit": 30.0,
            "config": {"run": {"nodes": 3}, "nemesis": {"nemesis": "kill-leader"}},
            "ops": [{"seconds": 3.25, "f": "kill", "value": "leader"},
                    {"seconds": 9.5, "f": "start", "value": None}]}
    data.update(changes)
    return data


def test_schedule_file_round_trip(tmp_path):
    original = ScheduleFile.from_json(schedule(), "x.json")
    assert original.ops == (TimedOp(3.25, "kill", "leader"), TimedOp(9.5, "start"))
    assert original.anomalies == ["lost-write"]
    path = tmp_path / "schedule.json"
    write_schedule(path, original)
    assert read_schedule(path) == original
    assert json.loads(path.read_text())["format"] == "kchaos-schedule"
    op = original.ops[0].to_op(original.time_limit)
    assert op == {"type": "info", "process": "nemesis", "f": "kill", "value": "leader",
                  "time": 3_250_000_000}
    assert TimedOp(30.0005, "start").to_op(30.0)["time"] == 30 * S - 1  # inside the limit
    late = ScheduleFile.from_json(schedule(ops=[{"seconds": 30.0005, "f": "start"}]), "x")
    assert late.ops == (TimedOp(30.0005, "start"),)  # recorded just after the limit


@pytest.mark.parametrize("changes, message", [
    ({"format": "other"}, "format: not a kchaos schedule"),
    ({"version": 2}, "version: version 2 is not supported; this kchaos reads version 1"),
    ({"seed": "7"}, "seed: must be an integer"),
    ({"time_limit": 0}, "time_limit: must be a number of seconds > 0"),
    ({"config": {"nemesis": {}}}, "config: must be test.json's \"config\""),
    ({"ops": {"kill": 1}}, "ops: must be a list"),
    ({"ops": [{"seconds": -1, "f": "kill"}]}, "ops[0].seconds: must be a number >= 0"),
    ({"ops": [{"seconds": 1, "f": ""}]}, "ops[0].f: must be a nemesis op name"),
    ({"ops": [{"seconds": 5, "f": "kill"}, {"seconds": 4, "f": "start"}]},
     "ops[1].seconds: 4 is before ops[0]'s 5.0; ops must be in time order"),
    ({"ops": [{"seconds": 31.5, "f": "kill"}]},
     "ops[0].seconds: 31.5 is past the time limit 30.0, so it would never be invoked"),
])
def test_a_bad_schedule_file_says_where_and_what(tmp_path, changes, message):
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(schedule(**changes)))
    with pytest.raises(ScheduleError) as error:
        read_schedule(path)
    assert str(error.value).startswith(f"{path}: ")
    assert message in str(error.value)


def test_a_schedule_file_that_is_not_json_names_line_and_column(tmp_path):
    path = tmp_path / "bad.json"
    path.write_text('{"format": "kchaos-schedule",\n "ops": [}\n')
    with pytest.raises(ScheduleError, match=r"bad.json: line 2 column 10: not valid JSON"):
        read_schedule(path)
    with pytest.raises(ScheduleError, match="cannot read"):
        read_schedule(tmp_path / "missing.json")


def test_the_fault_names_the_user_asked_survive_the_schedule_file_and_its_replay(tmp_path):
    """A replay's ops name their faults as the original run's did, so the faults checker
    counts them under the asked names."""
    history = [{"type": "info", "process": "nemesis", "f": "kill", "value": value,
                "fault": "kill-coordinator", "time": 3_000_000_000} for value in
               ("coordinator", {"n1": "killed"})]
    [op] = recorded_schedule(history, ["start", "heal"], 20.0)
    assert op.fault == "kill-coordinator"
    path = tmp_path / "schedule.json"
    write_schedule(path, ScheduleFile((op,), 1, 20.0, {"run": {}}))
    [read] = read_schedule(path).ops
    assert read == op and read.to_op(20.0)["fault"] == "kill-coordinator"
