"""`kchaos replay` and `kchaos shrink`: a stored run's fault schedule, run again or cut down."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from harness import exit_codes

__all__ = ["add_commands"]

SOURCE_HELP = ("a run folder (store/<test>/<time>/; a test folder or the store mean their "
               "latest run) or a schedule file written by `kchaos shrink`")


def add_commands(commands: argparse._SubParsersAction) -> None:
    replay = commands.add_parser(
        "replay", help="run a stored run's fault schedule again",
        description="Run a stored run again: the same configuration and seed, and its "
        "recorded nemesis ops (the same faults on the same roles, e.g. 'leader', at the same "
        "times) in place of a random schedule; or a schedule file written by `kchaos "
        "shrink`. The new run is stored as usual (its test.json says what it replays) and "
        "a last line says whether the original anomaly types reappeared. Exit 0 valid, 1 "
        "anomalies found, 2 unknown, 3 harness or input error.")
    replay.add_argument("source", nargs="?", type=Path, metavar="RUN|FILE", help=SOURCE_HELP)
    replay.add_argument("--schedule", type=Path, metavar="FILE",
                        help="a schedule file (the same as giving it as RUN|FILE)")
    replay.add_argument("--store", type=Path, metavar="DIR",
                        help="store folder (default: the source run's store)")
    replay.set_defaults(handler=_replay)

    shrink = commands.add_parser(
        "shrink", help="the smallest fault schedule that still shows a run's anomalies",
        description="Delta-debug a run's fault schedule: remove fault episodes (ddmin), then "
        "cut the time limit and halve the holds, replaying each candidate as a run, while "
        "the target anomaly types still appear. A candidate reproduces when one of its "
        "runs (up to --tries) shows every target type. Writes "
        "store/<test>/<time>-shrink/ with schedule.json (the smallest reproducing "
        "schedule so far, for `kchaos replay`), shrink.md (every step) and each candidate's "
        "schedule; the candidates' runs are ordinary runs in the store. Exit 0 when it "
        "finished or its budget was spent, 3 on an input error, or when it stopped on errors "
        "or Ctrl-C.")
    shrink.add_argument("source", type=Path, metavar="RUN|FILE", help=SOURCE_HELP)
    shrink.add_argument("--anomaly", action="append", metavar="TYPE",
                        help="anomaly type to keep, repeatable (default: every type that made "
                        "the source invalid; any type it showed, allowed or not, may be named)")
    shrink.add_argument("--max-runs", type=int, default=12, metavar="N",
                        help="at most N replay runs (default 12)")
    shrink.add_argument("--max-minutes", type=float, default=60.0, metavar="M",
                        help="start no run after M minutes (default 60)")
    shrink.add_argument("--tries", type=int, default=1, metavar="K",
                        help="runs per candidate before it counts as not reproducing "
                        "(default 1)")
    shrink.add_argument("--margin", type=float, default=5.0, metavar="SECONDS",
                        help="seconds kept after the last fault when the time limit is cut "
                        "(default 5)")
    shrink.add_argument("--store", type=Path, metavar="DIR",
                        help="store folder (default: the source run's store)")
    shrink.set_defaults(handler=_shrink)


def _load(args: argparse.Namespace):
    from harness.replay import load_source, store_of

    source = args.schedule if getattr(args, "schedule", None) else args.source
    if source is None:
        raise ValueError("give a run folder or a schedule file (RUN|FILE or --schedule FILE)")
    schedule, path = load_source(source)
    return schedule, path, args.store or store_of(schedule)


def _replay(args: argparse.Namespace) -> int:
    from harness.config import ConfigError
    from harness.replay import reappearance, replay, replay_config

    try:
        schedule, path, store = _load(args)
        config = replay_config(schedule, store, str(path or schedule.source.get("run")))
    except (ValueError, OSError, ConfigError) as error:
        print(f"kchaos replay: {error}", file=sys.stderr)
        return exit_codes.ERROR
    _ensure_root(config)
    try:
        outcome = replay(schedule, store=store, schedule_path=path)
    except ValueError as error:
        print(f"kchaos replay: {error}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"kchaos replay: {reappearance(schedule.anomalies, outcome.anomalies)}", flush=True)
    return outcome.exit_code


def _shrink(args: argparse.Namespace) -> int:
    from harness.config import ConfigError
    from harness.replay import replay, replay_config
    from harness.shrink import Attempt, Shrink, shrink_folder, target_of

    try:
        for flag, value, low in (("--max-runs", args.max_runs, 1), ("--tries", args.tries, 1),
                                 ("--margin", args.margin, 0)):
            if value < low:
                raise ValueError(f"{flag} must be >= {low}, got {value:g}")
        if args.max_minutes <= 0:
            raise ValueError(f"--max-minutes must be > 0, got {args.max_minutes:g}")
        schedule, path, store = _load(args)
        where = str(path or schedule.source.get("run"))
        config = replay_config(schedule, store, where)
        target = target_of(schedule, args.anomaly, where)
        if not schedule.ops:
            raise ValueError(f"{where}: the schedule has no ops, nothing to shrink")
    except (ValueError, OSError, ConfigError) as error:
        print(f"kchaos shrink: {error}", file=sys.stderr)
        return exit_codes.ERROR
    _ensure_root(config)

    def run_one(candidate, candidate_path) -> Attempt:
        started = time.monotonic()
        outcome = replay(candidate, store=store, schedule_path=candidate_path)
        return Attempt(outcome.run_dir, outcome.exit_code, outcome.anomalies,
                       time.monotonic() - started)

    folder = shrink_folder(store, schedule)
    print(f"kchaos shrink: {folder}", flush=True)
    try:
        done = Shrink(schedule, target, folder, run_one, max_runs=args.max_runs,
                      max_minutes=args.max_minutes, tries=args.tries,
                      margin=args.margin).run()
    except ValueError as error:
        print(f"kchaos shrink: {error}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"kchaos shrink: {done.summary()}")
    print(f"kchaos shrink: smallest schedule {folder / 'schedule.json'} (`kchaos replay` it); "
          f"steps in {folder / 'shrink.md'}", flush=True)
    return exit_codes.ERROR if done.failed else exit_codes.VALID


def _ensure_root(config) -> None:
    from harness.control.userns import ensure_root

    if config.backend.backend == "local":
        ensure_root(sys.argv[1:])
