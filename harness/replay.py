"""`kchaos replay`: a stored run's fault schedule, run again (same parts).

    schedule_of_run(run_dir)        # the schedule a run's history recorded (nemesis.schedule)
    load_source(path)               # a run folder, or a schedule file written by shrink
    replay(schedule, store=...)     # one run: the same configuration and seed, the
                                    # recorded ops in place of the random schedule

A replay re-invokes each recorded op with the value it was invoked with (the role:
"leader", "controller", "one", a partition shape) at the time it was invoked, with the
same seed (the workload's generator makes the same ops) and the same configuration. The
new run's test.json says what it replays ("replay": the source run, the schedule file,
the expected anomaly types), and its folder holds the schedule it ran (schedule.json).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, TextIO

from checker.history import read_history
from checker.history.errors import HistoryError
from harness.config import ConfigError, TestConfig, all_options, load_config
from harness.store import HISTORY_FILE, RESULTS_FILE, TEST_FILE, read_test, resolve_run
from harness.test import Test, build_test
from nemesis.package import Schedule, package
from nemesis.schedule import (
    NEMESIS,
    ScheduleError,
    ScheduleFile,
    read_schedule,
    recorded_schedule,
    write_schedule,
)

__all__ = ["SCHEDULE_FILE", "ReplayOutcome", "ReplayTest", "anomaly_types", "load_source",
           "reappearance", "replay", "replay_test", "schedule_of_run"]

SCHEDULE_FILE = "schedule.json"
SECTIONS = ("run", "backend", "db", "workload", "nemesis")


@dataclass(frozen=True)
class ReplayTest(Test):
    """A Test whose test.json also says what it replays."""

    replay: Mapping[str, Any] = field(default_factory=dict)

    def record(self) -> dict[str, Any]:
        return {**super().record(), "replay": dict(self.replay)}


@dataclass(frozen=True)
class ReplayOutcome:
    run_dir: Path
    exit_code: int
    anomalies: list[str] | None  # every anomaly type found; None: no results.json
    failing: list[str] | None  # those the configuration does not allow


# --- where schedules come from ---------------------------------------------------------------


def anomaly_types(results: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """Every anomaly type results.json reports, and those its configuration does not allow
    (the ones that make a run invalid)."""
    found: set[str] = set()
    failing: set[str] = set()
    for body in (results.get("checkers") or {}).values():
        if isinstance(body, Mapping):
            allowed = set(body.get("allowed") or ())
            kinds = set(body.get("anomalies") or {})
            found |= kinds
            failing |= kinds - allowed
    return sorted(found), sorted(failing)


def read_anomalies(run_dir: Path) -> tuple[list[str], list[str]] | tuple[None, None]:
    """`anomaly_types` of a checked run; (None, None) when it has no results.json."""
    try:
        return anomaly_types(json.loads((run_dir / RESULTS_FILE).read_text()))
    except (OSError, ValueError):
        return None, None


def schedule_of_run(run_dir: Path) -> ScheduleFile:
    """The fault schedule `run_dir`'s history recorded, with the run's configuration and
    seed; ScheduleError when the run cannot be replayed."""
    test = read_test(run_dir)
    if not isinstance(test.get("config"), dict):
        raise ScheduleError(f"{run_dir / TEST_FILE}: no \"config\" (an older kchaos wrote it), "
                            f"so its configuration cannot be repeated; run it again with "
                            f"`kchaos run` and the options it shows")
    history = run_dir / HISTORY_FILE
    if not history.is_file():
        raise ScheduleError(f"{run_dir}: no {HISTORY_FILE}: the run stopped before its "
                            f"workload started, so it recorded no schedule; replay a run "
                            f"with a history, or a schedule file written by `kchaos shrink`")
    try:
        final_fs = [op["f"] for op in package(test.get("nemesis") or "none").final_generator]
        nemesis_ops = [op.to_json() for op in read_history(history) if op.process == NEMESIS]
    except HistoryError as error:
        raise ScheduleError(f"{error}; the history cannot be read, so neither can its "
                            f"schedule") from error
    except ValueError as error:
        raise ScheduleError(f"{run_dir / TEST_FILE}: nemesis {test.get('nemesis')!r}: "
                            f"{error}") from error
    ops = recorded_schedule(nemesis_ops, final_fs, float(test["time_limit"]))
    if not ops:
        raise ScheduleError(f"{history}: no fault was invoked before the final phase "
                            f"(nemesis {test.get('nemesis')!r}), so there is no schedule to "
                            f"replay; to repeat a run without faults, `kchaos run` it again "
                            f"with --seed {test['seed']}")
    found, failing = read_anomalies(run_dir)
    return ScheduleFile(tuple(ops), int(test["seed"]), float(test["time_limit"]),
                        test["config"], {"run": str(run_dir), "anomalies": found,
                                         "failing": failing})


def load_source(source: Path) -> tuple[ScheduleFile, Path | None]:
    """A schedule from a schedule file, or from a run folder (a test folder or the store
    mean their latest run); with the file's path, None for a run."""
    source = Path(source)
    if source.is_file():
        return read_schedule(source), source
    try:
        run_dir = resolve_run(source)
    except FileNotFoundError as error:
        raise ScheduleError(f"{error}; or give a schedule file (.json) written by "
                            f"`kchaos shrink`") from error
    return schedule_of_run(run_dir), None


def store_of(schedule: ScheduleFile) -> Path:
    """Where a replay of `schedule` is stored by default: the store of the run it came
    from, else the store its configuration names."""
    run = schedule.source.get("run")
    if isinstance(run, str) and (Path(run) / TEST_FILE).is_file():
        return Path(run).parent.parent
    return Path(schedule.config.get("run", {}).get("store") or "store")


# --- the replay ----------------------------------------------------------------------------


def replay_config(schedule: ScheduleFile, store: Path, where: str) -> TestConfig:
    """The recorded configuration, with the schedule's seed and time limit and `store`."""
    given: dict[str, Any] = {}
    for section in SECTIONS:
        given.update(schedule.config.get(section) or {})
    given.pop("no_check", None)  # a replay is always checked: its verdict is the point
    unknown = sorted(set(given) - set(all_options()))
    if unknown:
        raise ConfigError(f"{where}: config: options this kchaos does not know: "
                          f"{', '.join(unknown)}; remove them from the schedule file's "
                          f"\"config\" (and check that the rest still means the same)")
    given.update(seed=schedule.seed, time_limit=schedule.time_limit, store=str(store))
    try:
        return load_config(None, given)
    except ConfigError as error:
        raise ConfigError(f"{where}: the recorded configuration: {error}") from error


def replay_test(schedule: ScheduleFile, store: Path, record: Mapping[str, Any],
                where: str) -> ReplayTest:
    """The Test of `schedule`: built from its configuration as `kchaos run` builds one,
    its nemesis package's schedule replaced by the recorded ops."""
    test = build_test(replay_config(schedule, store, where))
    handled = test.nemesis.nemesis.fs
    for number, op in enumerate(schedule.ops):
        if op.f not in handled:
            raise ScheduleError(
                f"{where}: ops[{number}].f {op.f!r}: no fault of this configuration handles "
                f"it (nemesis {','.join(test.nemesis.faults) or 'none'}: "
                f"{', '.join(sorted(handled))}); add its fault to config.nemesis.nemesis")
    ops = tuple(op.to_op(schedule.time_limit) for op in schedule.ops)
    parts = {f.name: getattr(test, f.name) for f in fields(Test)}
    parts["nemesis"] = replace(test.nemesis, generator=Schedule(ops))
    return ReplayTest(**parts, replay=dict(record))


def replay(schedule: ScheduleFile, *, store: Path, schedule_path: Path | None = None,
           out: TextIO = sys.stdout) -> ReplayOutcome:
    """Run `schedule` once; its folder gets the schedule it ran (schedule.json)."""
    from harness.runner import run_test

    where = str(schedule_path or schedule.source.get("run") or "schedule")
    record = {"run": schedule.source.get("run"),
              "schedule_file": str(schedule_path) if schedule_path else None,
              "ops": len(schedule.ops), "anomalies": schedule.anomalies}
    test = replay_test(schedule, store, record, where)
    print(f"kchaos replay: {len(schedule.ops)} nemesis ops from {where}, seed {schedule.seed}, "
          f"{schedule.time_limit:g} s", file=out, flush=True)
    outcome = run_test(test, out)
    write_schedule(outcome.run_dir / SCHEDULE_FILE, schedule)
    found, failing = read_anomalies(outcome.run_dir)
    return ReplayOutcome(outcome.run_dir, outcome.exit_code, found, failing)


def reappearance(expected: list[str] | None, found: list[str] | None) -> str:
    """Whether the anomaly types of the source reappeared, in one line."""
    shown = ", ".join(found or []) or "none"
    if found is None:
        return "the replay has no verdict (it did not get to its checkers), nothing to compare"
    if expected is None:
        return (f"the source's anomaly types are not known (it was not checked), so there "
                f"is nothing to compare; found: {shown}")
    if not expected:
        return f"the source had no anomalies; found: {shown}"
    back = [kind for kind in expected if kind in found]
    missing = [kind for kind in expected if kind not in found]
    new = [kind for kind in found if kind not in expected]
    extra = f"; also found: {', '.join(new)}" if new else ""
    if not missing:
        return f"the original anomaly types reappeared: {', '.join(back)}{extra}"
    if back:
        return (f"the original anomaly types reappeared in part: {', '.join(back)}; missing: "
                f"{', '.join(missing)}{extra}")
    return f"the original anomaly types did not reappear (missing: {', '.join(missing)}){extra}"
