"""`kchaos nightly` without a cluster: plans and their errors, matrix expansion and names,
expectations on synthetic results, junit.xml, the night's state and resume, the scheduler
with a stand-in child, the resource check, and the trends of the store index."""

from __future__ import annotations

import datetime
import json
import sys
import textwrap
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from harness.nightly.execute import Resources, execute, fits, run_memory_mb
from harness.nightly.junit import junit_tree
from harness.nightly.night import evaluate
from harness.nightly.plan import (
    Expectation,
    PlanError,
    load_plan,
    parse_plan,
    suite_path,
    suites,
    toml_text,
)
from harness.nightly.state import find_night, load_night, new_night
from harness.nightly.verdicts import cell_outcome, facts_of, run_meets
from harness.store import index_store
from reports.night import write_night_page
from reports.trends import trend_points

MATRIX = """
name = "nightly"
budget = 60
seeds = 2
[defaults]
time_limit = 30
nodes = 3
broker_config = {"min.insync.replicas" = 2, "log.segment.bytes" = 1048576}
[matrix]
dbs = ["kchaos", "kafka"]
nemeses = ["partition", "kill-leader,pause"]
[matrix.configurations.safe]
acks = "all"
[matrix.configurations.unclean]
broker_config = {"unclean.leader.election.enable" = true, "min.insync.replicas" = 1}
expect = {anomalies = ["lost-write"], attributed_to = "unclean-election", found_in = 1}
[[cell]]
name = "staged"
options = {scenario = "unclean-2013"}
seeds = [7]
expect = {anomalies = ["lost-write"], attributed_to = "unclean-election"}
"""


def plan_of(text: str, name: str = "plan.toml"):
    return parse_plan(tomllib.loads(text), name)


# --- plans ------------------------------------------------------------------------------------


def test_a_matrix_expands_to_named_cells_with_merged_options_and_seed_major_runs():
    plan = plan_of(MATRIX)
    names = [cell.name for cell in plan.cells]
    assert names[:4] == ["safe.queue.partition.kchaos", "safe.queue.partition.kafka",
                         "safe.queue.kill-leader+pause.kchaos",
                         "safe.queue.kill-leader+pause.kafka"]
    assert len(names) == 9 and names[-1] == "staged.kchaos"
    unclean = next(c for c in plan.cells if c.name == "unclean.queue.partition.kafka")
    assert unclean.db == "kafka" and unclean.configuration == "unclean"
    assert unclean.options["broker_config"] == {"min.insync.replicas": 1,
                                                "log.segment.bytes": 1048576,
                                                "unclean.leader.election.enable": True}
    assert unclean.options["nemesis"] == "partition" and unclean.seeds == (1, 2)
    assert unclean.expect == Expectation(("lost-write",), "unclean-election", 1)
    staged = plan.cells[-1]
    assert staged.seeds == (7,) and staged.time_limit == 30.0  # the scenario's time limit wins
    assert staged.run_options(7, Path("/s"))["no_check"] is True
    runs = [(cell.name, seed) for cell, seed in plan.runs()]
    assert runs[:9] == [(name, 1) for name in names[:8]] + [("staged.kchaos", 7)]
    assert runs[9:] == [(name, 2) for name in names[:8]]
    assert plan.budget_minutes == 60 and plan.parallel == 1


@pytest.mark.parametrize(("text", "expected"), [
    ('nmae = "x"\n[[cell]]\nname = "a"', "unknown key nmae"),
    ('[defaults]\nackz = "all"\n[[cell]]\nname = "a"', "defaults.ackz: not a `kchaos run` option"),
    ('[defaults]\nseed = 3\n[[cell]]\nname = "a"', "defaults.seed: set by the night itself"),
    ('[[cell]]\nname = "a"\noptions = {acks = "two"}', "cell a.kchaos: "),
    ('[[cell]]\nname = "a"\nexpect = {found_in = 2, anomalies = ["lost-write"]}',
     "found_in is 2 but the cell has 1 seeds"),
    ('[[cell]]\nname = "a"\nexpect = {anomalies = []}', "a detection needs anomalies"),
    ('[[cell]]\nname = "a"\nexpect = "broken"', 'must be "valid" or a table'),
    ('[[cell]]\nname = "a"\nexpect = {any_of = "G1c"}', "expect.any_of must be a list"),
    ('[[cell]]\nname = "a"\n[[cell]]\nname = "a"', "two cells are named 'a.kchaos'"),
    ('name = "x"', "no cells"),
    ('seeds = []\n[[cell]]\nname = "a"', "seeds must be a count"),
    ('[matrix]\ndbs = "kchaos"', "matrix.dbs must be a non-empty list"),
    ('[[cell]]\nname = "a b"', "cell[0].name must be a plain name"),
    ('parallel = 0\n[[cell]]\nname = "a"', "parallel must be an integer >= 1"),
])
def test_plan_errors_name_the_file_the_key_and_what_to_do(text, expected):
    with pytest.raises(PlanError) as error:
        plan_of(text, "bad.toml")
    assert str(error.value).startswith("bad.toml: ")
    assert expected in str(error.value)


def test_a_bad_option_value_is_judged_as_kchaos_run_judges_it(tmp_path):
    path = tmp_path / "p.toml"
    path.write_text('[[cell]]\nname = "a"\noptions = {acks = "two", time_limit = 5}\n')
    with pytest.raises(PlanError, match=r"p\.toml: cell a\.kchaos: .*acks must be one of"):
        load_plan(path)
    path.write_text("not = [toml")
    with pytest.raises(PlanError, match="not valid TOML"):
        load_plan(path)


def test_shipped_suites_load_and_an_unknown_suite_lists_them():
    assert "smoke" in suites()
    plan = load_plan(suite_path("smoke"))
    assert [cell.expect.valid for cell in plan.cells] == [True, False]
    with pytest.raises(PlanError, match="shipped suites: .*smoke"):
        suite_path("nope")


def test_options_round_trip_through_the_child_toml():
    options = {"acks": "all", "time_limit": 12.5, "nodes": 3, "idempotence": False,
               "name": 'we"ird\\', "broker_config": {"a.b": 1, "c": True}}
    assert tomllib.loads(toml_text(options)) == options


# --- expectations on synthetic results --------------------------------------------------------


def write_history(path: Path, ops: list[tuple[int, str, object]]) -> Path:
    """(time ns, type, process) per op; indices dense."""
    with open(path, "w") as handle:
        for index, (time, kind, process) in enumerate(ops):
            handle.write(json.dumps({"index": index, "time": time, "type": kind,
                                     "process": process, "f": "send", "value": []}) + "\n")
    return path


def results(valid, anomalies: dict[str, dict], allowed: dict[str, list] | None = None,
            fraction: float | None = 0.25) -> dict:
    checkers: dict = {}
    for name, kinds in anomalies.items():
        checkers[name] = {"valid": True, "allowed": (allowed or {}).get(name, []),
                          "anomalies": kinds}
    checkers["availability"] = {"valid": True, "stats": {"overall": {"fraction": fraction}}}
    return {"valid": valid, "checkers": checkers}


UNCLEAN = results(True, {
    "queue": {"lost-write": {"count": 3, "examples": [{"ops": [2, 3]}, {"ops": [4, 5]}]}},
    "elections": {"unclean-election-loss": {"count": 3, "examples": [{"ops": [4, 5]}]}},
}, {"queue": ["lost-write"], "elections": ["unclean-election-loss"]})
DETECT = Expectation(("lost-write",), "unclean-election")


@pytest.fixture
def history(tmp_path):
    return write_history(tmp_path / "history.jsonl", [
        (0, "invoke", 0), (1_000_000_000, "ok", 0), (2_000_000_000, "invoke", 1),
        (3_000_000_000, "ok", 1), (4_500_000_000, "invoke", 2), (5_000_000_000, "ok", 2),
        (6_000_000_000, "info", "nemesis"), (8_000_000_000, "invoke", 3)])


def test_allowed_anomalies_count_for_a_detection_and_give_the_first_anomaly_time(history):
    facts = facts_of(UNCLEAN, DETECT, history)
    assert facts.valid is True and facts.failing == {}
    assert facts.anomalies == {"lost-write": 3, "unclean-election-loss": 3}
    assert facts.first_anomaly_s == 2.0  # the earliest op of the earliest witness
    assert facts.ops_per_s == 0.5  # 4 client invocations over 8 s
    assert facts.availability == 0.75
    assert run_meets(DETECT, facts)
    assert not run_meets(Expectation(("lost-write",), "clean-election"), facts)
    assert not run_meets(Expectation(("duplicate",)), facts)
    assert run_meets(Expectation((), "unclean-election"), facts)
    assert not run_meets(Expectation(("lost-write",), within=1.5), facts)
    assert run_meets(Expectation(("lost-write",), within=2.0), facts)
    assert run_meets(Expectation(any_of=("G1c", "lost-write")), facts)
    assert not run_meets(Expectation(any_of=("G1c", "duplicate")), facts)
    # a valid cell asks for the verdict: loss the configuration allows keeps a run valid
    assert run_meets(Expectation(), facts_of(UNCLEAN, Expectation(), history))


def test_a_valid_cell_needs_valid_true_in_every_seed(history):
    cell = plan_of('seeds = 3\n[[cell]]\nname = "a"').cells[0]
    valid = facts_of(results(True, {}), cell.expect, history)
    unknown = facts_of(results("unknown", {}), cell.expect, history)
    invalid = facts_of(results(False, {"queue": {"duplicate": {"count": 2, "examples": [
        {"ops": [6, 7]}]}}}), cell.expect, history)
    assert invalid.failing == {"duplicate": 2} and invalid.first_anomaly_s == 6.0
    assert cell_outcome(cell, [valid, valid, valid]).met
    outcome = cell_outcome(cell, [valid, unknown, invalid])
    assert not outcome.met and outcome.runs_met == 1
    assert "2 of 3 runs not valid" in outcome.reason and "INVALID: duplicate 2" in outcome.reason
    assert not cell_outcome(cell, [valid, valid, None], skipped=1).met


def test_a_detection_cell_is_met_in_found_in_of_its_seeds(history):
    cell = plan_of('seeds = 5\n[[cell]]\nname = "d"\nexpect = {anomalies = ["lost-write"], '
                   'attributed_to = "unclean-election", found_in = 4}').cells[0]
    found = facts_of(UNCLEAN, cell.expect, history)
    missed = facts_of(results(True, {}), cell.expect, history)
    outcome = cell_outcome(cell, [found, found, found, found, missed])
    assert outcome.met and outcome.runs_met == 4 and outcome.needed == 4
    assert outcome.median_first_anomaly_s == 2.0
    assert outcome.reason == "found in 4 of 5 seeds (needs 4)"
    assert not cell_outcome(cell, [found, found, found, missed, None], errors=1).met


def test_an_absent_type_fails_a_run_even_where_its_configuration_allows_it(history):
    cell = plan_of('seeds = 2\n[[cell]]\nname = "fixed"\n'
                   'expect = {absent = ["lost-write"]}').cells[0]
    assert cell.expect.valid and cell.expect.absent == ("lost-write",)
    assert cell.expect.to_json() == {"anomalies": [], "absent": ["lost-write"]}
    assert cell.expect.describe() == "valid in every seed, without lost-write"
    lossy = facts_of(UNCLEAN, cell.expect, history)
    clean = facts_of(results(True, {}), cell.expect, history)
    assert lossy.valid is True and not run_meets(cell.expect, lossy)
    outcome = cell_outcome(cell, [clean, lossy])
    assert not outcome.met and outcome.runs_met == 1 and "1 of 2 runs not valid" in outcome.reason
    assert cell_outcome(cell, [clean, clean]).met
    assert not run_meets(Expectation(("unclean-election-loss",), absent=("lost-write",)), lossy)


def test_missing_results_meet_nothing(tmp_path):
    facts = facts_of({}, Expectation(), tmp_path / "none.jsonl")
    assert facts.valid is None and not run_meets(Expectation(), facts)
    assert not run_meets(DETECT, None)


# --- the night: state, scheduling, resume, junit, summary, trends -----------------------------

CHILD = textwrap.dedent("""
    import json, sys, time, tomllib
    from pathlib import Path
    options = tomllib.loads(Path(sys.argv[sys.argv.index("--config") + 1]).read_text())
    seed = options["seed"]
    if seed == 13:
        print("kchaos: harness error: boom")
        sys.exit(3)
    run = Path(options["store"]) / options["name"] / f"20260101T00000{seed}"
    run.mkdir(parents=True)
    print(f"kchaos: run {run}  (seed {seed})", flush=True)
    (run / "test.json").write_text(json.dumps({"name": options["name"], "seed": seed}))
    lines = [{"index": 0, "time": 0, "type": "invoke", "process": 0, "f": "send", "value": []},
             {"index": 1, "time": 2_000_000_000, "type": "ok", "process": 0, "f": "send",
              "value": []}]
    (run / "history.jsonl").write_text("".join(json.dumps(op) + "\\n" for op in lines))
    time.sleep(float(options.get("recovery_seconds", 0)))
""")

NIGHT = """
name = "tiny"
seeds = [1, 13]
[defaults]
time_limit = 1
recovery_seconds = 0.2
[[cell]]
name = "valid"
[[cell]]
name = "finds"
expect = {anomalies = ["lost-write"], found_in = 1}
"""


def stand_in(tmp_path: Path) -> list[str]:
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    return [sys.executable, str(script)]


def give_results(night, verdicts: dict[str, dict]) -> None:
    """What the night's Spark check would write, per cell."""
    for record in night.runs:
        if record.status == "stored":
            body = verdicts[record.cell]
            (night.folder / record.run_dir / "results.json").write_text(json.dumps(body))


def test_a_night_runs_every_cell_and_seed_and_judges_them(tmp_path):
    plan = plan_of(NIGHT)
    night = new_night(tmp_path / "store", plan, NIGHT, datetime.datetime(2026, 1, 2))
    assert night.folder == tmp_path / "store" / "nightly" / "2026-01-02"
    cells = {cell.name: cell for cell in plan.cells}
    lines = []

    class Out:
        def write(self, text):
            lines.append(text)

        def flush(self):
            pass

    assert execute(night, cells, 2, None, Out(), command=stand_in(tmp_path))
    statuses = {(r.cell, r.seed): r.status for r in load_night(night.folder).runs}
    assert statuses == {("valid.kchaos", 1): "stored", ("finds.kchaos", 1): "stored",
                        ("valid.kchaos", 13): "error", ("finds.kchaos", 13): "error"}
    text = "".join(lines)
    assert "[1/4] valid.kchaos seed=1 started" in text and "estimated remaining" in text
    assert "FAILED (exit 3): kchaos: harness error: boom" in text
    give_results(night, {"valid.kchaos": results(True, {}),
                         "finds.kchaos": UNCLEAN})
    outcomes = evaluate(night, cells)
    assert outcomes["finds.kchaos"].met and not outcomes["valid.kchaos"].met
    tree = junit_tree("tiny", cells, night.runs, outcomes).getroot()
    assert tree.attrib | {"time": "0"} == {"name": "tiny", "tests": "4", "failures": "0",
                                           "errors": "2", "skipped": "0", "time": "0"}
    case = tree.find("testcase[@name='valid.kchaos seed=1']")
    assert case.attrib["classname"] == "valid.kchaos" and case.find("failure") is None
    props = {p.attrib["name"]: p.attrib["value"] for p in case.iter("property")}
    assert props["seed"] == "1" and props["db"] == "kchaos" and props["verdict"] == "true"
    assert props["state"] == "valid"
    unclean = tree.find("testcase[@name='finds.kchaos seed=1']")
    assert {p.attrib["name"]: p.attrib["value"] for p in unclean.iter("property")}[
        "state"] == "allowed"
    assert unclean.find("system-out").text.startswith("ALLOWED: ")
    assert json.loads(props["configuration"]) == {"recovery_seconds": 0.2, "time_limit": 1}
    assert props["run"] == "valid.kchaos/20260101T000001" and props["ops_per_s"] == "0.5"
    error = tree.find("testcase[@name='valid.kchaos seed=13']/error")
    assert error.attrib["message"] == "kchaos: harness error: boom"
    page = write_night_page(night.folder, night.state).read_text()
    assert "CELLS NOT MET: 1 of 2" in page and "valid.kchaos/20260101T000001/report.html" in page
    assert "Detection" in page and "1/2" in page


def test_junit_fails_a_run_only_when_its_cell_is_not_met(tmp_path):
    text = NIGHT.replace("[1, 13]", "[1, 2]").replace("found_in = 1", "found_in = 2")
    plan = plan_of(text)
    night = new_night(tmp_path, plan, text)
    cells = {cell.name: cell for cell in plan.cells}
    assert execute(night, cells, 1, None, open("/dev/null", "w"), command=stand_in(tmp_path))
    give_results(night, {"valid.kchaos": results(False, {"queue": {"duplicate": {
        "count": 1, "examples": [{"ops": [1]}]}}}), "finds.kchaos": results(True, {})})
    outcomes = evaluate(night, cells)
    tree = junit_tree("t", cells, night.runs, outcomes).getroot()
    assert tree.attrib["failures"] == "4"
    messages = [f.attrib["message"] for f in tree.iter("failure")]
    assert messages[:2] == ["anomalies: duplicate 1",
                            "expected: finds lost-write in at least 2 seeds; found: none"]
    ET.fromstring(ET.tostring(tree))  # well-formed


def test_the_budget_skips_runs_that_would_not_end_in_time(tmp_path):
    plan = plan_of(NIGHT.replace('name = "tiny"', 'name = "tiny"\nbudget = 1.5'))
    night = new_night(tmp_path, plan, NIGHT)
    cells = {cell.name: cell for cell in plan.cells}
    # before any run ended a run is estimated at its time limit + 60 s: the first fits the
    # 90 s budget; then the measured overhead (< 1 s) lets the others run too
    assert execute(night, cells, 1, 1.5, open("/dev/null", "w"), command=stand_in(tmp_path))
    assert [r.status for r in night.runs] == ["stored", "stored", "error", "error"]
    night2 = new_night(tmp_path, plan, NIGHT)
    assert night2.folder.name.endswith("-2")
    assert execute(night2, cells, 1, 0.5, open("/dev/null", "w"), command=stand_in(tmp_path))
    assert [r.status for r in night2.runs] == ["skipped"] * 4
    assert "budget of 0.5 min" in night2.runs[0].error


def test_resume_reruns_interrupted_and_skipped_runs_only(tmp_path):
    plan = plan_of(NIGHT)
    night = new_night(tmp_path, plan, NIGHT)
    a, b, c, d = night.runs
    a.status, a.run_dir = "stored", "valid.kchaos/x"
    b.status, b.run_dir = "running", "finds.kchaos/partial"
    c.status, d.status = "skipped", "error"
    night.save()
    assert find_night(tmp_path, "tiny") == night.folder
    assert find_night(tmp_path, "other") is None
    again = load_night(night.folder)
    assert again.resume() == 2
    assert [r.status for r in again.runs] == ["stored", "pending", "pending", "error"]
    assert again.runs[1].replaced == ["finds.kchaos/partial"] and again.runs[1].run_dir is None
    again.save()
    assert load_night(night.folder).resume() == 2  # still pending: nothing ran in between
    finished = load_night(night.folder)
    for record in finished.runs:
        record.status = "stored"
    assert finished.resume() == 0


def test_parallel_is_refused_with_the_reason_when_it_does_not_fit():
    plan = plan_of('[defaults]\nnodes = 5\nzookeepers = 3\n[[cell]]\nname = "a"\n'
                   'dbs = ["kchaos", "kafka"]')
    per_run = run_memory_mb(plan.cells[1])
    assert per_run > run_memory_mb(plan.cells[0])
    assert fits(1, plan.cells, Resources(1, 10)) is None
    assert "needs 3 cores" in fits(3, plan.cells, Resources(2, 10**6))
    reason = fits(2, plan.cells, Resources(2, per_run))
    assert f"needs about {2 * per_run} MB" in reason and "a.kafka" in reason
    assert fits(2, plan.cells, Resources(2, 2 * per_run)) is None


def test_the_store_index_shows_trends_per_cell_across_nights(tmp_path):
    store = tmp_path / "store"
    for day, met, lost in ((1, True, 5), (2, False, 0)):
        folder = store / "nightly" / f"2026-01-0{day}"
        folder.mkdir(parents=True)
        (folder / "night.json").write_text(json.dumps({
            "plan": {"name": "p"}, "started": f"2026-01-0{day}T01:00:00", "cells": [],
            "outcomes": {"d.kchaos": {"met": met, "runs": 5, "runs_met": 4 if met else 0,
                                      "anomalies": {"lost-write": lost},
                                      "median_ops_per_s": 50.0 + day,
                                      "median_availability": 0.9}}}))
    points = trend_points(store)
    assert [(p.night, p.met, p.anomalies, p.ops_per_s) for p in points["d.kchaos"]] == [
        ("2026-01-01", True, 5, 51.0), ("2026-01-02", False, 0, 52.0)]
    page = index_store(store).read_text()
    assert "Nightly trends" in page and "nightly/trends/d.kchaos.png" in page
    assert (store / "nightly" / "trends" / "d.kchaos.png").stat().st_size > 1000
    assert "nightly/2026-01-02/summary.html" in page


def test_a_refused_parallelism_or_a_missing_night_exits_3_and_starts_nothing(tmp_path):
    import io

    from harness.nightly.night import NightOptions, run_night

    plan = tmp_path / "plan.toml"
    plan.write_text(NIGHT)
    out = io.StringIO()
    assert run_night(NightOptions(plan, tmp_path / "store", parallel=999), out) == 3
    assert "refused: --parallel 999 needs 999 cores" in out.getvalue()
    assert not (tmp_path / "store").exists()
    out = io.StringIO()
    assert run_night(NightOptions(plan, tmp_path / "store", resume=True), out) == 3
    assert "--resume: no night of plan 'tiny'" in out.getvalue()
