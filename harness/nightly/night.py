"""`kchaos nightly`: a night of runs from a plan, checked together, with junit and a summary.

    plan (harness.nightly.plan) -> night folder and state (state) -> the runs, each a
    child `kchaos run` without its own check (execute) -> one Spark job checks every
    stored run (harness.runner.check_runs) -> facts and expectations (verdicts) ->
    junit.xml (junit), summary.html (reports.night), the store index with trends
    (reports.index, reports.trends)

Exit code: 0 when every cell met its expectation, 1 otherwise, 3 for a bad plan, a
parallelism that does not fit, an interrupted night or a harness error of the night
itself (a run's harness error is that run's `error` and leaves its cell unmet).
"""

from __future__ import annotations

import contextlib
import os
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

from harness import exit_codes
from harness.nightly.execute import Resources, execute, fits
from harness.nightly.junit import write_junit
from harness.nightly.plan import Cell, Plan, PlanError, load_plan, parse_plan
from harness.nightly.state import (
    STORED,
    Night,
    find_night,
    load_night,
    new_night,
)
from harness.nightly.verdicts import CellOutcome, cell_outcome, run_facts, run_meets
from harness.store import RESULTS_FILE, index_store

__all__ = ["JUNIT_FILE", "NightOptions", "evaluate", "run_night"]

JUNIT_FILE = "junit.xml"
CHECK_LOG = "check.log"


class NightOptions:
    def __init__(self, plan: Path | None, store: Path, parallel: int | None = None,
                 resume: bool = False, night: Path | None = None,
                 spark_master: str = "local[*]") -> None:
        self.plan, self.store, self.parallel = plan, store, parallel
        self.resume, self.night, self.spark_master = resume, night, spark_master


def _refuse_unfit(plan: Plan, options: NightOptions) -> None:
    """PlanError with the reason when the night's parallelism does not fit this machine."""
    refused = fits(options.parallel or plan.parallel, plan.cells, Resources.of_machine())
    if refused:
        raise PlanError(f"refused: {refused}")


def _open_night(options: NightOptions, out: TextIO) -> tuple[Plan, Night]:
    """The night to run (a new one, or the one to resume), once the plan and its
    parallelism are known to be fine."""
    if options.resume or options.night is not None:
        folder = options.night
        if folder is None:
            if options.plan is None:
                raise PlanError("--resume needs the plan (or --suite) or --night DIR")
            name = load_plan(options.plan).name
            folder = find_night(options.store, name)
            if folder is None:
                raise PlanError(f"--resume: no night of plan {name!r} in "
                                f"{options.store / 'nightly'}; start one without --resume")
        try:
            night = load_night(folder)
        except FileNotFoundError as error:
            raise PlanError(str(error)) from error
        text = night.state["plan"]["text"]
        plan = parse_plan(tomllib.loads(text), night.state["plan"].get("source", "plan"))
        _refuse_unfit(plan, options)
        again = night.resume()
        night.save()
        print(f"kchaos nightly: resuming {night.folder}: {again} run(s) to run, "
              f"{len(night.runs) - again} finished before", file=out, flush=True)
        return plan, night
    if options.plan is None:
        raise PlanError("give a plan file or --suite NAME")
    plan = load_plan(options.plan)
    _refuse_unfit(plan, options)
    night = new_night(options.store, plan, options.plan.read_text(encoding="utf-8"))
    print(f"kchaos nightly: night {night.folder}: plan {plan.name}, {len(plan.cells)} cells, "
          f"{len(night.runs)} runs" + (f", budget {plan.budget_minutes:g} min"
                                       if plan.budget_minutes else ""), file=out, flush=True)
    return plan, night


def run_night(options: NightOptions, out: TextIO = sys.stdout) -> int:
    try:
        plan, night = _open_night(options, out)
    except PlanError as error:
        print(f"kchaos nightly: {error}", file=out, flush=True)
        return exit_codes.ERROR
    parallel = options.parallel or plan.parallel
    cells = {cell.name: cell for cell in plan.cells}
    if not execute(night, cells, parallel, plan.budget_minutes, out):
        return exit_codes.ERROR
    try:
        _check(night, options.spark_master, out)
    except Exception as error:  # the Spark job itself failed: the night cannot judge
        print(f"kchaos nightly: the check failed: {error} (details in "
              f"{night.folder / CHECK_LOG}); `kchaos nightly --resume` checks again",
              file=out, flush=True)
        return exit_codes.ERROR
    outcomes = evaluate(night, cells)
    return _write_outputs(night, plan, cells, outcomes, options.store, out)


def _check(night: Night, spark_master: str, out: TextIO) -> None:
    """One Spark job over every stored run not checked yet."""
    from harness.runner import check_runs

    todo = [night.folder / r.run_dir for r in night.runs
            if r.status == STORED and r.run_dir
            and not (night.folder / r.run_dir / RESULTS_FILE).is_file()]
    if not todo:
        return
    print(f"kchaos nightly: checking {len(todo)} run(s) in one Spark job ({spark_master}); "
          f"log in {night.folder / CHECK_LOG}", file=out, flush=True)
    with open(night.folder / CHECK_LOG, "a", encoding="utf-8") as log, _output_to(log):
        check_runs(todo, spark_master, log)


@contextlib.contextmanager
def _output_to(log: TextIO) -> Iterator[None]:
    """Standard output and error, of this process and of Spark's JVM it starts, into `log`."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        with contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
            yield
    finally:
        log.flush()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for fd in saved:
            os.close(fd)


def evaluate(night: Night, cells: dict[str, Cell]) -> dict[str, CellOutcome]:
    """Facts and `met` of every run, each cell's outcome; saved into the night's state."""
    by_cell: dict[str, list] = {name: [] for name in cells}
    skipped = dict.fromkeys(cells, 0)
    errors = dict.fromkeys(cells, 0)
    for record in night.runs:
        cell = cells[record.cell]
        if record.status == STORED and record.run_dir:
            facts = run_facts(night.folder / record.run_dir, cell)
            record.facts = facts.to_json()
            record.met = run_meets(cell.expect, facts)
            by_cell[cell.name].append(facts if facts.valid is not None else None)
            if facts.valid is None:
                errors[cell.name] += 1
        else:
            record.facts, record.met = None, False
            by_cell[cell.name].append(None)
            if record.status == "skipped":
                skipped[cell.name] += 1
            else:
                errors[cell.name] += 1
    outcomes = {name: cell_outcome(cell, by_cell[name], skipped[name], errors[name])
                for name, cell in cells.items()}
    night.state["outcomes"] = {name: o.to_json() for name, o in outcomes.items()}
    night.state["checked"] = True
    night.save()
    return outcomes


def _write_outputs(night: Night, plan: Plan, cells: dict[str, Cell],
                   outcomes: dict[str, CellOutcome], store: Path, out: TextIO) -> int:
    from reports.night import write_night_page

    junit = write_junit(night.folder / JUNIT_FILE,
                        f"kchaos nightly {plan.name} {night.folder.name}", cells, night.runs,
                        outcomes)
    page = write_night_page(night.folder, night.state)
    try:
        index_store(store)
    except Exception as error:  # the index is a convenience; the night's verdict stands
        print(f"kchaos nightly: the store index could not be written: {error}", file=out)
    width = max(len(name) for name in cells)
    print(f"\n{'cell':<{width}}  {'db':<7} {'met':<7} why", file=out)
    for name, outcome in outcomes.items():
        print(f"{name:<{width}}  {cells[name].db:<7} {'met' if outcome.met else 'NOT MET':<7} "
              f"{outcome.reason}", file=out)
    met = sum(1 for o in outcomes.values() if o.met)
    print(f"\nkchaos nightly: {met} of {len(outcomes)} cells met; junit {junit}; summary "
          f"{page}", file=out, flush=True)
    return exit_codes.VALID if met == len(outcomes) else exit_codes.INVALID
