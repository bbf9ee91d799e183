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
from harness.nightly.state import RunRecord, find_night, load_night, new_night
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
    assert staged.seeds == (7,) and staged.time_limit == 40.0  # the scenario's time limit wins
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
    ('[[cell]]\nname = "a"\nexpect = {absent = ["lost-wirte"]}',
     "cell a.expect.absent: unknown anomaly type (no checker reports it) 'lost-wirte'; "
     "did you mean 'lost-write'?"),
    ('[[cell]]\nname = "a"\nexpect = {anomalies = ["G1-c"]}', "did you mean 'G1c'?"),
    ('[[cell]]\nname = "a"\nexpect = {any_of = ["duplicate", "comit-rewind"]}',
     "did you mean 'commit-rewind'?"),
    ('[[cell]]\nname = "a"\nexpect = {attributed_to = "uncleanelection"}',
     "cell a.expect.attributed_to: unknown cause (no checker reports it) 'uncleanelection'; "
     "did you mean 'unclean-election'?"),
    ('[matrix.configurations.x]\nexpect = {absent = ["lost"]}',
     "matrix.configurations.x.expect.absent: unknown anomaly type"),
    ('seeds = 2\n[[cell]]\nname = "a"\nexpect = {absent = ["lost-write"], found_in = 1}',
     "cell a.expect.found_in: only a detection"),
    ('[[cell]]\nname = "a"\nexpect = {absent = ["unseen"], within = 60}',
     "cell a.expect.within: only a detection"),
    ('seeds = 2\n[[cell]]\nname = "a"\nexpect = {anomalies = ["unseen"], conclusive_in = 1}',
     "cell a.expect.conclusive_in: a detection counts only conclusive runs"),
    ('[[cell]]\nname = "a"\nexpect = {conclusive_in = 2}',
     "cell a.kchaos: expect.conclusive_in is 2 but the cell has 1 seeds"),
    ('[[cell]]\nname = "a"\nneeds = ["strand-folower"]',
     "cell a.needs: unknown fault (`kchaos run --nemesis list`) 'strand-folower'; "
     "did you mean 'strand-follower'?"),
    ('[[cell]]\nname = "a"\nneeds = "kill"', "cell a.needs must be a list of fault names"),
    ('[[cell]]\nname = "a"\nneeds = ["strand-follower"]',
     "cell a.kchaos: needs strand-follower, which its runs never ask for (they ask for "
     "partition-one,"),
    ('[[cell]]\nname = "a"\noptions = {nemesis = "none"}\nneeds = ["kill"]',
     "(they ask for no fault)"),
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


@pytest.mark.parametrize("name", suites())
def test_every_shipped_suite_loads_and_validates(name):
    plan = load_plan(suite_path(name))
    assert plan.name == name and plan.cells
    for cell in plan.cells:
        assert cell.needs is None or set(cell.needs) <= set(cell.faults)
        if cell.expect.valid:
            assert cell.expect.found_in is None and cell.expect.within is None


def test_shipped_suites_load_and_an_unknown_suite_lists_them():
    assert {"detection", "versions", "sample", "smoke"} <= set(suites())
    plan = load_plan(suite_path("smoke"))
    assert [cell.expect.valid for cell in plan.cells] == [True, False]
    with pytest.raises(PlanError, match="shipped suites: .*smoke"):
        suite_path("nope")


def test_options_round_trip_through_the_child_toml():
    options = {"acks": "all", "time_limit": 12.5, "nodes": 3, "idempotence": False,
               "name": 'we"ird\\', "broker_config": {"a.b": 1, "c": True}}
    assert tomllib.loads(toml_text(options)) == options


# --- expectations on synthetic results --------------------------------------------------------


def write_history(path: Path, ops: list[tuple]) -> Path:
    """(time ns, type, process[, f, value]) per op; indices dense."""
    with open(path, "w") as handle:
        for index, (time, kind, process, *rest) in enumerate(ops):
            f, value = rest if rest else ("send", [])
            op = {"index": index, "time": time, "type": kind, "process": process, "f": f,
                  "value": value}
            if process == "nemesis":
                op["fault"] = FAULT_OF.get(f, f)
            handle.write(json.dumps(op) + "\n")
    return path


FAULT_OF = {"kill": "kill", "start": "kill", "start-partition": "partition-one",
            "stop-partition": "partition-one"}


def results(valid, anomalies: dict[str, dict], allowed: dict[str, list] | None = None,
            fraction: float | None = 0.25, took_effect: dict[str, int] | None = None) -> dict:
    checkers: dict = {}
    for name, kinds in anomalies.items():
        checkers[name] = {"valid": True, "allowed": (allowed or {}).get(name, []),
                          "anomalies": kinds}
    checkers["availability"] = {"valid": True, "stats": {"overall": {"fraction": fraction}}}
    effect = {"kill": 1} if took_effect is None else took_effect
    checkers["faults"] = {"valid": True, "anomalies": {}, "stats": {
        "asked": ["partition-one", "kill", "pause"], "invoked": dict(effect),
        "took_effect": effect, "never": [f for f in ("partition-one", "kill", "pause")
                                         if not effect.get(f)]}}
    return {"valid": valid, "checkers": checkers}


UNCLEAN = results(True, {
    "queue": {"lost-write": {"count": 3, "examples": [{"ops": [2, 3]}, {"ops": [4, 5]}]}},
    "elections": {"unclean-election-loss": {"count": 3, "examples": [{"ops": [4, 5]}]}},
}, {"queue": ["lost-write"], "elections": ["unclean-election-loss"]})


def cell_of(expect: str = '"valid"', seeds: int = 1, extra: str = ""):
    """A cell of the default nemesis (partition, kill, pause) with `expect`."""
    return plan_of(f'seeds = {seeds}\n[[cell]]\nname = "c"\nexpect = {expect}\n'
                   f'{extra}').cells[0]


DETECT = cell_of('{anomalies = ["lost-write"], attributed_to = "unclean-election"}')


@pytest.fixture
def history(tmp_path):
    return write_history(tmp_path / "history.jsonl", [
        (0, "invoke", 0), (1_000_000_000, "ok", 0), (2_000_000_000, "invoke", 1),
        (3_000_000_000, "ok", 1), (4_500_000_000, "invoke", 2), (5_000_000_000, "ok", 2),
        (6_000_000_000, "info", "nemesis", "kill", {"n1": "killed"}),
        (8_000_000_000, "invoke", 3)])


def test_allowed_anomalies_count_for_a_detection_and_give_the_time_to_detection(history):
    facts = facts_of(UNCLEAN, DETECT, history)
    assert facts.valid is True and facts.failing == {} and facts.inconclusive is None
    assert facts.anomalies == {"lost-write": 3, "unclean-election-loss": 3}
    # a loss the final reads reveal: the history has no read, so its end (op 7 at 8 s);
    # the kill at 6 s is the first fault after the witness's first op (4.5 s)
    assert facts.detection == {"type": "unclean-election-loss", "reveal_op": 7,
                               "reveal_s": 8.0, "fault": "kill", "fault_start_s": 6.0,
                               "seconds": 2.0}
    assert facts.ops_per_s == 0.5  # 4 client invocations over 8 s
    assert facts.availability == 0.75
    assert facts.took_effect == {"kill": 1}
    assert run_meets(DETECT.expect, facts)
    assert not run_meets(Expectation(("lost-write",), "clean-election"), facts)
    assert not run_meets(Expectation(("duplicate",)), facts)
    assert run_meets(Expectation((), "unclean-election"), facts)
    unclean = "unclean-election"
    assert not run_meets(Expectation(("lost-write",), unclean, within=1.5), facts)
    assert run_meets(Expectation(("lost-write",), unclean, within=2.0), facts)
    assert run_meets(Expectation(any_of=("G1c", "lost-write"), attributed_to=unclean), facts)
    assert not run_meets(Expectation(any_of=("G1c", "duplicate"), attributed_to=unclean),
                         facts)
    # an allowed type counts as found only where the cell makes the allowed loss its point
    assert not run_meets(Expectation(("lost-write",)), facts)
    assert not run_meets(Expectation(any_of=("G1c", "lost-write")), facts)
    # a valid cell asks for the verdict: loss the configuration allows keeps a run valid
    assert run_meets(Expectation(), facts_of(UNCLEAN, cell_of(), history))


def test_a_valid_cell_needs_valid_true_in_every_seed(history):
    cell = cell_of(seeds=3)
    valid = facts_of(results(True, {}), cell, history)
    unknown = facts_of(results("unknown", {}), cell, history)
    invalid = facts_of(results(False, {"queue": {"duplicate": {"count": 2, "examples": [
        {"ops": [6, 7]}]}}}), cell, history)
    assert invalid.failing == {"duplicate": 2} and invalid.detection_s == 2.0  # kill at 6 s
    assert cell_outcome(cell, [valid, valid, valid]).met
    outcome = cell_outcome(cell, [valid, unknown, invalid])
    assert not outcome.met and outcome.runs_met == 1
    assert "2 of 3 conclusive runs not valid" in outcome.reason
    assert "INVALID: duplicate 2" in outcome.reason
    assert not cell_outcome(cell, [valid, valid, None], skipped=1).met


def test_a_detection_cell_is_met_in_found_in_of_its_seeds(history):
    cell = cell_of('{anomalies = ["lost-write"], attributed_to = "unclean-election", '
                   'found_in = 4}', seeds=5)
    found = facts_of(UNCLEAN, cell, history)
    missed = facts_of(results(True, {}), cell, history)
    outcome = cell_outcome(cell, [found, found, found, found, missed])
    assert outcome.met and outcome.runs_met == 4 and outcome.needed == 4
    assert outcome.median_detection_s == 2.0 and outcome.max_detection_s == 2.0
    assert outcome.reason == "found in 4 of 5 conclusive runs, 5 seeds (needs 4)"
    assert not cell_outcome(cell, [found, found, found, missed, None], errors=1).met


def test_an_absent_type_fails_a_run_even_where_its_configuration_allows_it(history):
    cell = cell_of('{absent = ["lost-write"]}', seeds=2)
    assert cell.expect.valid and cell.expect.absent == ("lost-write",)
    assert cell.expect.to_json() == {"anomalies": [], "absent": ["lost-write"]}
    assert cell.expect.describe() == "valid in every seed, without lost-write"
    lossy = facts_of(UNCLEAN, cell, history)
    clean = facts_of(results(True, {}), cell, history)
    assert lossy.valid is True and not run_meets(cell.expect, lossy)
    outcome = cell_outcome(cell, [clean, lossy])
    assert not outcome.met and outcome.runs_met == 1
    assert "1 of 2 conclusive runs not valid" in outcome.reason
    assert cell_outcome(cell, [clean, clean]).met
    assert not run_meets(Expectation(("unclean-election-loss",), absent=("lost-write",)), lossy)


def test_missing_results_meet_nothing(tmp_path):
    facts = facts_of({}, cell_of(), tmp_path / "none.jsonl")
    assert facts.valid is None and not run_meets(Expectation(), facts)
    assert not run_meets(DETECT.expect, None)


# --- needs and inconclusive runs --------------------------------------------------------------


def test_a_run_whose_needed_fault_never_took_effect_is_neither_found_nor_valid(history):
    strand = cell_of('{anomalies = ["lost-write"], attributed_to = "unclean-election", '
                     'found_in = 1}', seeds=2,
                     extra='options = {nemesis = "strand-follower,kill"}\n'
                           'needs = ["strand-follower"]')
    assert strand.faults == ("strand-follower", "kill") and strand.needs == ("strand-follower",)
    lossy = {**UNCLEAN, "checkers": dict(UNCLEAN["checkers"])}
    lossy["checkers"]["faults"] = results(True, {}, took_effect={"kill": 3})["checkers"]["faults"]
    facts = facts_of(lossy, strand, history)
    assert facts.inconclusive == "inconclusive: strand-follower never took effect"
    assert not run_meets(strand.expect, facts)  # the loss was found, but not for its reason
    outcome = cell_outcome(strand, [facts, facts])
    assert not outcome.met and outcome.conclusive == 0 and outcome.inconclusive == 2
    assert "2 inconclusive (strand-follower never took effect)" in outcome.reason
    took = {**lossy, "checkers": {**lossy["checkers"], "faults": results(
        True, {}, took_effect={"strand-follower": 1})["checkers"]["faults"]}}
    met = facts_of(took, strand, history)
    assert met.inconclusive is None and run_meets(strand.expect, met)
    assert cell_outcome(strand, [met, facts]).met  # found in 1 conclusive run of 1 needed


def test_by_default_one_of_the_cells_faults_must_take_effect_and_needs_empty_opts_out(history):
    default = cell_of()  # partition, kill, pause
    assert default.needs is None and "kill" in default.faults
    nothing = results(True, {}, took_effect={})
    assert facts_of(nothing, default, history).inconclusive == (
        "inconclusive: none of " + ", ".join(default.faults) + " took effect")
    assert facts_of(results(True, {}, took_effect={"pause": 1}), default,
                    history).inconclusive is None
    assert facts_of(nothing, cell_of(extra="needs = []"), history).inconclusive is None
    quiet = cell_of(extra='options = {nemesis = "none"}')
    assert quiet.faults == () and facts_of(nothing, quiet, history).inconclusive is None
    no_accounting = results(True, {})
    del no_accounting["checkers"]["faults"]
    assert "no fault accounting" in facts_of(no_accounting, default, history).inconclusive
    staged = plan_of('[[cell]]\nname = "s"\noptions = {scenario = "unclean-2013"}\n'
                     'needs = ["shrink-isr-isolate-leader"]').cells[0]
    assert staged.faults == ("shrink-isr-isolate-leader",)


def test_a_valid_cell_needs_conclusive_in_conclusive_runs_all_valid(history):
    cell = cell_of(seeds=3)
    valid = facts_of(results(True, {}), cell, history)
    unsure = facts_of(results(True, {}, took_effect={}), cell, history)
    outcome = cell_outcome(cell, [valid, valid, unsure])
    assert not outcome.met and outcome.conclusive == 2 and outcome.needed == 3
    lenient = cell_of("{conclusive_in = 2}", seeds=3)
    assert lenient.expect.valid and lenient.expect.describe() == (
        "valid in at least 2 conclusive runs")
    assert cell_outcome(lenient, [valid, valid, unsure]).met
    assert not cell_outcome(lenient, [valid, unsure, unsure]).met
    invalid = facts_of(results(False, {"queue": {"duplicate": {"count": 1, "examples": [
        {"ops": [7]}]}}}), lenient, history)
    assert not cell_outcome(lenient, [valid, valid, invalid]).met


def test_junit_skips_an_inconclusive_run_of_a_met_cell_and_fails_it_in_an_unmet_one(tmp_path):
    text = NIGHT.replace("[1, 13]", "[1, 2]")
    plan = plan_of(text)
    night = new_night(tmp_path, plan, text)
    cells = {cell.name: cell for cell in plan.cells}
    assert execute(night, cells, 1, None, open("/dev/null", "w"), command=stand_in(tmp_path))
    give_results(night, {"valid.kchaos": results(True, {}, took_effect={}),
                         "finds.kchaos": UNCLEAN})
    for record in night.runs:  # the first seed of the detection cell did nothing
        if record.cell == "finds.kchaos" and record.seed == 1:
            (night.folder / record.run_dir / "results.json").write_text(json.dumps(
                results(True, {}, took_effect={})))
    outcomes = evaluate(night, cells)
    assert outcomes["finds.kchaos"].met and not outcomes["valid.kchaos"].met
    tree = junit_tree("t", cells, night.runs, outcomes).getroot()
    skipped = tree.find("testcase[@name='finds.kchaos seed=1']/skipped")
    assert skipped.attrib["message"].startswith("inconclusive: none of partition-one")
    failure = tree.find("testcase[@name='valid.kchaos seed=1']/failure")
    assert failure.attrib["type"] == "inconclusive"
    assert tree.attrib["failures"] == "2" and tree.attrib["skipped"] == "1"
    state = json.loads((night.folder / "night.json").read_text())
    assert state["outcomes"]["valid.kchaos"]["inconclusive"] == 2
    page = write_night_page(night.folder, night.state).read_text()
    assert "inconclusive: none of partition-one" in page


# --- time to detection ------------------------------------------------------------------------

S = 1_000_000_000


def lost_write_history(tmp_path: Path, reveal_s: float) -> Path:
    """A send acked at 2 s (offset 0 of key 1), a kill at 10 s, then reads of key 1: the
    first one above offset 0 at `reveal_s`, and a final read at 50 s."""
    poll = ["poll", {"1": [[1, 11]]}]
    return write_history(tmp_path / f"h{reveal_s}.jsonl", [
        (1 * S, "invoke", 0, "send", [["send", 1, 10]]),
        (2 * S, "ok", 0, "send", [["send", 1, [0, 10]]]),
        (5 * S, "info", "nemesis", "start-partition", "no-target"),
        (10 * S, "info", "nemesis", "kill", {"n1": "killed"}),
        (12 * S, "info", "nemesis", "start", {"n1": "started"}),
        (int(reveal_s * S) - 1, "invoke", 1, "poll", [["poll"]]),
        (int(reveal_s * S), "ok", 1, "poll", [poll]),
        (50 * S - 1, "invoke", 2, "poll", [["poll"]]),
        (50 * S, "ok", 2, "poll", [poll])])


def lost(*ops: int, election_ms: int | None = None) -> dict:
    witness = {"key": 1, "value": 10, "offset": 0, "max-read-offset": 1, "ops": list(ops)}
    if election_ms is not None:
        witness["election"] = {"time": election_ms, "unclean": False}
    return witness


def test_time_to_detection_runs_from_the_causing_fault_to_the_first_revealing_read(tmp_path):
    cell = cell_of('{anomalies = ["lost-write"], within = 10}')
    body = results(False, {"queue": {"lost-write": {"count": 1, "examples": [lost(1, 8)]}}})
    fast = facts_of(body, cell, lost_write_history(tmp_path, 14.0))
    # the write's first op (2 s) came before any fault took effect (the partition found
    # no target): the kill at 10 s is the first after it; the poll at 14 s reveals it,
    # not the final read at 50 s the witness names
    assert fast.detection == {"type": "lost-write", "reveal_op": 6, "reveal_s": 14.0,
                              "fault": "kill", "fault_start_s": 10.0, "seconds": 4.0}
    assert run_meets(cell.expect, fast)
    slow = facts_of(body, cell, lost_write_history(tmp_path, 30.0))
    assert slow.detection_s == 20.0 and not run_meets(cell.expect, slow)
    outcome = cell_outcome(cell_of('{anomalies = ["lost-write"], within = 10, found_in = 1}',
                                   seeds=2), [fast, slow])
    assert outcome.met and outcome.median_detection_s == 12.0 and outcome.max_detection_s == 20.0
    strict = cell_of('{anomalies = ["lost-write"], within = 10}', seeds=2)
    records = [RunRecord(strict.name, seed, "stored", "r", facts=f.to_json(),
                         met=run_meets(strict.expect, f)) for seed, f in ((1, fast), (2, slow))]
    tree = junit_tree("t", {strict.name: strict}, records,
                      {strict.name: cell_outcome(strict, [fast, slow])}).getroot()
    assert tree.find("testcase/failure").attrib["message"] == (
        "expected: finds lost-write within 10 s of its fault in every seed; found: "
        "lost-write 1, detected 20 s after its fault")
    props = {p.attrib["name"]: p.attrib["value"] for p in tree.find("testcase").iter("property")}
    assert props["detection_s"] == "4.0" and json.loads(props["detection"])["fault"] == "kill"


def test_an_election_names_the_episode_that_caused_the_loss(tmp_path):
    cell = cell_of('{anomalies = ["lost-write"], attributed_to = "clean-election"}')
    history = lost_write_history(tmp_path, 30.0)
    start_wall_ms = 1_000_000
    # elected at 11 s: the kill (10 s) is the last episode started before it
    body = results(True, {"elections": {"clean-election-loss": {"count": 1, "examples": [
        lost(1, 8, election_ms=start_wall_ms + 11_000)]}}})
    facts = facts_of(body, cell, history, {"start_wall_ms": start_wall_ms})
    assert facts.detection["fault"] == "kill" and facts.detection_s == 20.0
    # elected at 4 s, before any fault took effect: counted from the test's start
    early = results(True, {"elections": {"clean-election-loss": {"count": 1, "examples": [
        lost(1, 8, election_ms=start_wall_ms + 4_000)]}}})
    facts = facts_of(early, cell, history, {"start_wall_ms": start_wall_ms})
    assert facts.detection["fault"] is None and facts.detection_s == 30.0


def test_an_overwritten_write_is_revealed_by_the_first_read_of_another_value_at_its_offset(
        tmp_path):
    # value 10 acked at offset 0 and read at 3 s; a strand at 5 s; a read at 9 s sees it
    # again, one at 20 s sees 11 there; the witness names the final read at 50 s
    history = write_history(tmp_path / "h.jsonl", [
        (1 * S, "invoke", 0, "send", [["send", 1, 10]]),
        (2 * S, "ok", 0, "send", [["send", 1, [0, 10]]]),
        (3 * S, "ok", 1, "poll", [["poll", {"1": [[0, 10]]}]]),
        (5 * S, "info", "nemesis", "strand-follower", "leader"),
        (8 * S, "info", "nemesis", "strand-follower", {"n1": "killed"}),
        (9 * S, "ok", 1, "poll", [["poll", {"1": [[0, 10]], "2": [[0, 12]]}]]),
        (20 * S, "ok", 2, "poll", [["poll", {"1": [[0, 11], [1, 13]]}]]),
        (50 * S, "ok", 2, "poll", [["poll", {"1": [[0, 11], [1, 13]]}]])])
    cell = cell_of('{anomalies = ["lost-write"], within = 20}',
                   extra='options = {nemesis = "strand-follower"}')
    witness = {"key": 1, "value": 10, "offset": 0, "overwritten-by": 11, "ops": [1, 2, 7]}
    body = results(False, {"queue": {"lost-write": {"count": 1, "examples": [witness]}}},
                   took_effect={"strand-follower": 1})
    facts = facts_of(body, cell, history)
    assert facts.detection == {"type": "lost-write", "reveal_op": 6, "reveal_s": 20.0,
                               "fault": "strand-follower", "fault_start_s": 5.0,
                               "seconds": 15.0}
    assert run_meets(cell.expect, facts)


def test_a_fault_that_waited_for_a_target_starts_when_it_acted(tmp_path):
    # requested at 5 s, it waited 10 s for a partition to qualify, acted at 15 s
    history = write_history(tmp_path / "h.jsonl", [
        (1 * S, "invoke", 0, "send", [["send", 1, 10]]),
        (2 * S, "ok", 0, "send", [["send", 1, [0, 10]]]),
        (5 * S, "info", "nemesis", "strand-follower", "leader"),
        (27 * S, "info", "nemesis", "strand-follower", {"n1": "killed", "waited": 10.0}),
        (40 * S, "ok", 2, "poll", [["poll", {"1": [[0, 11]]}]])])
    cell = cell_of('{anomalies = ["lost-write"], within = 30}',
                   extra='options = {nemesis = "strand-follower"}')
    witness = {"key": 1, "value": 10, "offset": 0, "overwritten-by": 11, "ops": [1, 4]}
    body = results(False, {"queue": {"lost-write": {"count": 1, "examples": [witness]}}},
                   took_effect={"strand-follower": 1})
    facts = facts_of(body, cell, history)
    assert facts.detection["fault_start_s"] == 15.0 and facts.detection_s == 25.0
    assert run_meets(cell.expect, facts)


def test_a_cycle_is_revealed_by_its_last_op_and_a_fault_in_force_caused_it(tmp_path):
    history = write_history(tmp_path / "h.jsonl", [
        (1 * S, "info", "nemesis", "start-partition", {"n1": ["n2"]}),
        (2 * S, "invoke", 0, "txn", []), (3 * S, "ok", 0, "txn", []),
        (4 * S, "invoke", 1, "txn", []), (9 * S, "ok", 1, "txn", []),
        (20 * S, "info", "nemesis", "stop-partition", "network-healed")])
    cell = cell_of('{any_of = ["G1c"]}')
    body = results(False, {"txn": {"G1c": {"count": 1, "examples": [{"ops": [2, 4]}]}}},
                   took_effect={"partition-one": 1})
    facts = facts_of(body, cell, history)
    assert facts.detection == {"type": "G1c", "reveal_op": 4, "reveal_s": 9.0,
                               "fault": "partition-one", "fault_start_s": 1.0, "seconds": 8.0}



def test_a_stalled_producer_is_in_force_until_it_wakes(tmp_path):
    # a stall of 5 s asked at 10 s, taken at 11 s; the hijacked transaction began at 14 s
    # (before the zombie woke at 16 s) and a read at 17 s saw it before it ended
    history = write_history(tmp_path / "h.jsonl", [
        (10 * S, "info", "nemesis", "stall-producer", 5.0),
        (11 * S, "info", "nemesis", "stall-producer", {"stalled": "t1", "seconds": 5.0}),
        (14 * S, "invoke", 0, "txn", [["send", 1, 10]]),
        (17 * S, "ok", 1, "poll", [["poll", {"1": [[0, 10]]}]]),
        (18 * S, "info", 0, "txn", [["send", 1, [0, 10]]])])
    cell = cell_of('{any_of = ["precommitted-read"], within = 10}',
                   extra='options = {nemesis = "stall-producer"}')
    body = results(False, {"queue": {"precommitted-read": {"count": 1, "examples": [
        {"key": 1, "value": 10, "offset": 0, "ops": [2, 3]}]}}},
        took_effect={"stall-producer": 1})
    facts = facts_of(body, cell, history)
    assert facts.detection == {"type": "precommitted-read", "reveal_op": 3, "reveal_s": 17.0,
                               "fault": "stall-producer", "fault_start_s": 10.0,
                               "seconds": 7.0}


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
expect = {anomalies = ["lost-write"], attributed_to = "unclean-election", found_in = 1}
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
    assert "Detection" in page and "1/1" in page  # found in 1 of 1 conclusive run


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
                            "expected: finds lost-write attributed to unclean-election in "
                            "at least 2 seeds; found: none"]
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


def test_a_fault_counts_by_its_result_and_from_its_request(tmp_path):
    # as the nemesis records them: each action's request, then its result
    history = write_history(tmp_path / "h.jsonl", [
        (1 * S, "info", "nemesis", "strand-follower", "leader"),
        (3 * S, "info", "nemesis", "strand-follower", "no-target"),
        (4 * S, "info", "nemesis", "crash-lose-unflushed", "leader"),
        (int(10.4 * S), "info", "nemesis", "crash-lose-unflushed", {"n1": "crashed"}),
        (int(10.45 * S), "info", "nemesis", "power-on", None),
        (int(10.5 * S), "info", "nemesis", "power-on", {"n1": "started"}),
        (int(10.2 * S), "ok", 0, "send", [["send", 0, [40, 64]]]),
        (int(10.6 * S), "info", "nemesis", "crash-lose-unflushed", "replicas"),
        (18 * S, "info", "nemesis", "crash-lose-unflushed", {"n1": "crashed", "n2": "crashed"}),
        (40 * S, "ok", 1, "poll", [["poll", {"1": [[0, 1]]}]])])
    cell = cell_of('{anomalies = ["unseen"]}')
    body = results(False, {"queue": {"unseen": {"count": 1, "examples": [
        {"key": 0, "value": 64, "offset": 40, "ops": [6]}]}}})
    facts = facts_of(body, cell, history)
    # the strand found no target: no episode; the first crash had not acted (its result
    # came at 10.4 s) when the write was acked at 10.2 s, so the second crash, requested
    # at 10.6 s, caused the loss the final read at 40 s reveals
    assert facts.detection == {"type": "unseen", "reveal_op": 9, "reveal_s": 40.0,
                               "fault": "crash-lose-unflushed", "fault_start_s": 10.6,
                               "seconds": 29.4}


def test_a_run_gives_its_median_workload_failover_and_its_seconds_without_an_ok_write(history):
    body = results(True, {})
    body["checkers"]["availability"]["stats"].update({
        "overall": {"fraction": 0.25, "buckets-without-ok-send": 7},
        "failovers": [{"topic": "kchaos", "seconds": 9.5}, {"topic": "kchaos", "seconds": 3.5},
                      {"topic": "kchaos", "seconds": None},
                      {"topic": "__consumer_offsets", "seconds": 40.0}]})
    cell = cell_of(seeds=2)
    facts = facts_of(body, cell, history)
    assert (facts.failover_s, facts.idle_s) == (6.5, 7)
    quiet = facts_of(results(True, {}), cell, history)
    assert (quiet.failover_s, quiet.idle_s) == (None, None)
    outcome = cell_outcome(cell, [facts, quiet])
    assert (outcome.median_failover_s, outcome.median_idle_s) == (6.5, 7)


def test_a_loss_attributed_to_an_election_after_its_reveal_counts_from_a_fault_before_it(
        tmp_path):
    # acked at 2 s by a leader fenced at 10 s; the loss shows at 14 s; the checker names
    # the next election, at 25 s, after a second fault at 20 s
    poll = ["poll", {"1": [[1, 11]]}]
    history = write_history(tmp_path / "h.jsonl", [
        (1 * S, "invoke", 0, "send", [["send", 1, 10]]),
        (2 * S, "ok", 0, "send", [["send", 1, [0, 10]]]),
        (10 * S, "info", "nemesis", "kill", {"n1": "killed"}),
        (12 * S, "info", "nemesis", "start", {"n1": "started"}),
        (14 * S - 1, "invoke", 1, "poll", [["poll"]]),
        (14 * S, "ok", 1, "poll", [poll]),
        (20 * S, "info", "nemesis", "kill", {"n2": "killed"}),
        (22 * S, "info", "nemesis", "start", {"n2": "started"})])
    cell = cell_of('{anomalies = ["lost-write"], attributed_to = "clean-election"}')
    start_wall_ms = 1_000_000
    body = results(True, {"elections": {"clean-election-loss": {"count": 1, "examples": [
        lost(1, 5, election_ms=start_wall_ms + 25_000)]}}})
    facts = facts_of(body, cell, history, {"start_wall_ms": start_wall_ms})
    assert facts.detection["fault_start_s"] == 10.0 and facts.detection_s >= 0
