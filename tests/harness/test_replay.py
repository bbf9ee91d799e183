"""`kchaos replay` and `kchaos shrink` without a cluster: ddmin, schedules of stored runs,
the replayed Test, the shrink's search and files (runs faked), and the input errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.cli import main
from harness.config import load_config
from harness.ddmin import Exhausted, ddmin
from harness.replay import (
    ReplayTest,
    anomaly_types,
    load_source,
    reappearance,
    replay_test,
    schedule_of_run,
)
from harness.shrink import Attempt, Shrink, target_of
from nemesis.schedule import ScheduleError, ScheduleFile, TimedOp, episodes, read_schedule

S = 1_000_000_000


# --- ddmin ------------------------------------------------------------------------------------


def test_ddmin_finds_the_two_items_that_matter_in_few_calls():
    calls = []

    def reproduces(items):
        calls.append(items)
        return 3 in items and 7 in items

    assert ddmin(list(range(10)), reproduces) == [3, 7]
    assert len(calls) <= 16
    assert len({tuple(c) for c in calls}) == len(calls), "a subset was asked twice"


def test_ddmin_of_one_item_among_many_is_a_binary_search():
    calls = []
    assert ddmin(list(range(20)), lambda items: calls.append(items) or 13 in items) == [13]
    assert len(calls) <= 8


def test_ddmin_out_of_budget_returns_the_smallest_reproducing_set_so_far():
    calls = []

    def reproduces(items):
        if len(calls) == 3:
            raise Exhausted
        calls.append(items)
        return 3 in items and 7 in items

    found = ddmin(list(range(10)), reproduces)
    assert 3 in found and 7 in found and len(found) < 10


# --- stored runs --------------------------------------------------------------------------


def config_json(**options) -> dict:
    config = load_config(None, {"nodes": 3, "time_limit": 20.0,
                                "nemesis": "kill-leader,partition-one", **options}).to_json()
    config["run"]["seed"] = 5
    return config


def nemesis_op(index, time, f, value):
    return {"index": index, "time": int(time * S), "type": "info", "process": "nemesis",
            "f": f, "value": value}


def stored_run(root: Path, history: bool = True, faults: bool = True,
               results: dict | None = None) -> Path:
    run = root / "store" / "queue" / "20260101T000000"
    run.mkdir(parents=True)
    (run.parent / "latest").symlink_to(run.name)
    (run / "test.json").write_text(json.dumps({
        "name": "queue", "seed": 5, "time_limit": 20.0,
        "nemesis": "kill-leader,partition-one", "config": config_json()}))
    ops = [{"index": 0, "time": 100, "type": "invoke", "process": 0, "f": "send",
            "value": [["send", 1, 1]]},
           {"index": 1, "time": 200, "type": "ok", "process": 0, "f": "send",
            "value": [["send", 1, [0, 1]]]}]
    if faults:
        ops += [nemesis_op(2, 4.0, "kill", "leader"), nemesis_op(3, 4.2, "kill", {"n1": "killed"}),
                nemesis_op(4, 8.0, "start", None), nemesis_op(5, 8.1, "start", {"n1": "started"}),
                nemesis_op(6, 11.0, "start-partition", "one"),
                nemesis_op(7, 11.1, "start-partition", {"n2": ["n1"], "n1": ["n2"]}),
                nemesis_op(8, 15.0, "stop-partition", None),
                nemesis_op(9, 15.0, "stop-partition", "network-healed")]
    final = ["start", "stop-partition", "heal"]
    ops += [nemesis_op(len(ops) + i, 21.0 + i, f, None) for i, f in enumerate(final)]
    if history:
        (run / "history.jsonl").write_text("".join(json.dumps(op) + "\n" for op in ops))
    if results is not None:
        (run / "results.json").write_text(json.dumps(results))
    return run


RESULTS = {"valid": False, "checkers": {
    "queue": {"valid": False, "anomalies": {"lost-write": {"count": 2}, "int-send-skip":
                                            {"count": 1}}, "allowed": ["int-send-skip"]},
    "elections": {"valid": False, "anomalies": {"unclean-election-loss": {"count": 2}}},
    "txn": {"valid": True, "anomalies": {"G0": {"count": 3}}, "allowed": ["G0"]}}}


def test_anomaly_types_found_and_those_the_configuration_does_not_allow():
    assert anomaly_types(RESULTS) == (["G0", "int-send-skip", "lost-write",
                                       "unclean-election-loss"],
                                      ["lost-write", "unclean-election-loss"])


def test_the_schedule_of_a_stored_run(tmp_path):
    run = stored_run(tmp_path, results=RESULTS)
    schedule, path = load_source(run.parent)  # a test folder means its latest run
    assert path is None
    assert schedule.ops == (TimedOp(4.0, "kill", "leader"), TimedOp(8.0, "start"),
                            TimedOp(11.0, "start-partition", "one"),
                            TimedOp(15.0, "stop-partition"))
    assert (schedule.seed, schedule.time_limit) == (5, 20.0)
    assert schedule.anomalies == ["G0", "int-send-skip", "lost-write", "unclean-election-loss"]
    assert schedule.failing == ["lost-write", "unclean-election-loss"]
    assert Path(schedule.source["run"]) == run.resolve()


def test_the_replayed_test_runs_the_recorded_ops_and_says_so(tmp_path):
    schedule = schedule_of_run(stored_run(tmp_path))
    test = replay_test(schedule, tmp_path / "store", {"run": "R", "schedule_file": None},
                       "R")
    assert isinstance(test, ReplayTest)
    assert (test.seed, test.time_limit, test.nodes) == (5, 20.0, 3)
    assert [(op["f"], op["value"], op["time"]) for op in test.nemesis.generator] == [
        ("kill", "leader", 4 * S), ("start", None, 8 * S), ("start-partition", "one", 11 * S),
        ("stop-partition", None, 15 * S)]
    assert test.record()["replay"] == {"run": "R", "schedule_file": None}
    assert test.record()["config"]["run"]["seed"] == 5


def test_an_op_no_fault_of_the_configuration_handles_is_refused(tmp_path):
    schedule = schedule_of_run(stored_run(tmp_path))
    paused = ScheduleFile((TimedOp(1.0, "pause", "one"),), 5, 20.0, schedule.config)
    with pytest.raises(ScheduleError, match=r"f\.json: ops\[0\]\.f 'pause': no fault of this "
                                            r"configuration handles it"):
        replay_test(paused, tmp_path, {}, "f.json")


def test_reappearance_lines():
    assert reappearance(["a", "b"], ["b", "a", "c"]) == \
        "the original anomaly types reappeared: a, b; also found: c"
    assert reappearance(["a", "b"], ["a"]) == \
        "the original anomaly types reappeared in part: a; missing: b"
    assert reappearance(["a"], []) == "the original anomaly types did not reappear (missing: a)"
    assert reappearance([], []) == "the source had no anomalies; found: none"
    assert "no verdict" in reappearance(["a"], None)


# --- input errors, as the command line shows them ------------------------------------------


def kchaos(capsys, *argv):
    code = main(list(argv))
    return code, capsys.readouterr().err


def test_a_run_without_a_history_cannot_be_replayed(tmp_path, capsys):
    run = stored_run(tmp_path, history=False)
    code, err = kchaos(capsys, "replay", str(run))
    assert code == 3
    assert f"{run.resolve()}: no history.jsonl: the run stopped before its workload" in err
    assert "replay a run with a history, or a schedule file" in err


def test_a_run_without_faults_has_nothing_to_replay_or_shrink(tmp_path, capsys):
    run = stored_run(tmp_path, faults=False, results=RESULTS)
    for command in ("replay", "shrink"):
        code, err = kchaos(capsys, command, str(run))
        assert code == 3
        assert "history.jsonl: no fault was invoked before the final phase" in err
        assert "`kchaos run` it again with --seed 5" in err


def test_a_bad_schedule_file_is_an_input_error(tmp_path, capsys):
    path = tmp_path / "schedule.json"
    path.write_text(json.dumps({"format": "kchaos-schedule", "version": 1, "seed": 1,
                                "time_limit": 10, "config": {"run": {}}, "ops": [{"f": "kill"}]}))
    code, err = kchaos(capsys, "replay", "--schedule", str(path))
    assert code == 3
    assert f"kchaos replay: {path}: ops[0].seconds: must be a number >= 0, got None" in err
    code, err = kchaos(capsys, "replay", str(tmp_path / "nothing"))
    assert code == 3 and "not a run folder" in err and "or give a schedule file" in err


def test_shrink_needs_anomalies_to_aim_at(tmp_path, capsys):
    code, err = kchaos(capsys, "shrink", str(stored_run(tmp_path)))
    assert code == 3 and "the source was not checked (no results.json)" in err
    schedule = ten_episode_schedule()
    assert target_of(schedule, None, "R") == ["lost-write"]
    assert target_of(schedule, ["G0"], "R") == ["G0"]  # allowed, but asked for
    with pytest.raises(ValueError, match="--anomaly G2: the source did not show it"):
        target_of(schedule, ["G2"], "R")
    valid = ScheduleFile(schedule.ops, 1, 60.0, schedule.config,
                         {"anomalies": ["lost-write"], "failing": []})
    with pytest.raises(ValueError, match="valid for its configuration .* with --anomaly TYPE"):
        target_of(valid, None, "R")


# --- the shrink, with runs faked --------------------------------------------------------------


def ten_episode_schedule() -> ScheduleFile:
    ops = []
    for number in range(10):
        start = 2.0 + 5 * number
        ops += [TimedOp(start, "kill", {"name": f"e{number}"}), TimedOp(start + 4.0, "start")]
    return ScheduleFile(tuple(ops), 1, 60.0, {"run": {"workload": "queue"}},
                        {"run": "store/queue/20260101T000000", "anomalies": ["G0", "lost-write"],
                         "failing": ["lost-write"]})


class FakeRuns:
    """The anomaly appears when episodes e3 and e7 both run, e7 held at least 1.5 s, and
    the run lasts at least 5 s past e7's start; every run is recorded."""

    def __init__(self, errors: int = 0) -> None:
        self.runs: list[ScheduleFile] = []
        self.errors = errors

    def __call__(self, schedule: ScheduleFile, path: Path) -> Attempt:
        self.runs.append(schedule)
        assert read_schedule(path) == schedule
        if len(self.runs) <= self.errors:
            return Attempt(None, 3, None, 0.0)
        held = {e.start.value["name"]: e.hold for e in episodes(schedule.ops)}
        e7 = next((e for e in episodes(schedule.ops) if e.start.value["name"] == "e7"), None)
        found = ("e3" in held and "e7" in held and held["e7"] >= 1.5
                 and schedule.time_limit >= e7.start.seconds + 5)
        return Attempt(Path(f"run{len(self.runs)}"), 1 if found else 0,
                       ["lost-write"] if found else [], 60.0)


def test_shrink_removes_episodes_then_shortens_and_writes_what_it_found(tmp_path):
    runs = FakeRuns()
    lines = []
    out = type("Out", (), {"write": lambda self, text: lines.append(text),
                           "flush": lambda self: None})()
    done = Shrink(ten_episode_schedule(), ["lost-write"], tmp_path, runs, max_runs=30,
                  margin=3.0, out=out).run()
    assert [number for number, _ in done.best] == [4, 8]
    assert done.stopped.startswith("done") and not done.failed
    best = read_schedule(tmp_path / "schedule.json")
    assert [op.value["name"] for op in best.ops if op.value] == ["e3", "e7"]
    e7 = episodes(best.ops)[1]
    assert 1.5 <= e7.hold < 4.0, "e7's hold was halved while it still reproduced"
    assert best.time_limit < 60.0
    assert best.anomalies == ["lost-write"] == best.failing and best.seed == 1
    report = (tmp_path / "shrink.md").read_text()
    assert "| 1 | ddmin |" in report and "halve" in report and "cut time limit" in report
    assert "reproduces" in report and "`run1`" in report
    assert len(runs.runs) == len(list(tmp_path.glob("candidate-*.json")))
    assert any("candidate 1 (ddmin)" in line and "of at most 30" in line for line in lines)


def test_shrink_stops_when_its_runs_are_spent_with_the_best_so_far(tmp_path):
    runs = FakeRuns()
    done = Shrink(ten_episode_schedule(), ["lost-write"], tmp_path, runs, max_runs=3,
                  out=open("/dev/null", "w")).run()
    assert len(runs.runs) == 3
    assert done.stopped == "budget spent: 3 runs" and not done.failed
    best = read_schedule(tmp_path / "schedule.json")
    assert {"e3", "e7"} <= {op.value["name"] for op in best.ops if op.value}
    assert len(best.ops) < 20  # the first complement that reproduced


def test_shrink_stops_after_two_runs_in_a_row_that_erred(tmp_path):
    runs = FakeRuns(errors=2)
    done = Shrink(ten_episode_schedule(), ["lost-write"], tmp_path, runs, max_runs=30,
                  out=open("/dev/null", "w")).run()
    assert len(runs.runs) == 2 and done.failed
    assert "2 runs in a row erred" in done.stopped
    assert len(read_schedule(tmp_path / "schedule.json").ops) == 20
    assert "| error |" in (tmp_path / "shrink.md").read_text()


def test_with_tries_a_candidate_reproduces_when_any_of_its_runs_does(tmp_path):
    class Flaky(FakeRuns):
        """Every odd run misses the anomaly."""

        def __call__(self, schedule, path):
            attempt = super().__call__(schedule, path)
            return attempt if len(self.runs) % 2 == 0 else Attempt(attempt.run_dir, 0, [], 1.0)

    runs = Flaky()
    done = Shrink(ten_episode_schedule(), ["lost-write"], tmp_path, runs, max_runs=60,
                  tries=2, out=open("/dev/null", "w")).run()
    assert [number for number, _ in done.best] == [4, 8]
    report = (tmp_path / "shrink.md").read_text()
    assert "| 1 | ddmin | 1, 2, 3, 4, 5 | 60 s | does not reproduce |" in report
    assert "| 1 (run 2) | ddmin | 1, 2, 3, 4, 5 | 60 s | does not reproduce |" in report
    assert "(run 2)" in report and "| reproduces |" in report


def test_a_run_that_cannot_start_stops_the_shrink_and_keeps_its_files(tmp_path):
    def broken(schedule, path):
        raise OSError("no space left on device")

    done = Shrink(ten_episode_schedule(), ["lost-write"], tmp_path, broken,
                  out=open("/dev/null", "w")).run()
    assert done.failed and "OSError: no space left on device" in done.stopped
    assert len(read_schedule(tmp_path / "schedule.json").ops) == 20
