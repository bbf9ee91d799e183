"""`kchaos nightly PLAN.toml | --suite NAME`: a night of chaos runs (harness.nightly)."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness import exit_codes

__all__ = ["add_commands"]


def add_commands(commands: argparse._SubParsersAction) -> None:
    nightly = commands.add_parser(
        "nightly", help="run a night of chaos tests from a plan",
        description="Run every cell of a plan (a matrix of dbs x configurations x workloads x "
        "nemesis packages, or explicit cells) for each seed, each run a child `kchaos run` "
        "storing into store/nightly/<date>/; then check all histories in one Spark job and "
        "write junit.xml, summary.html and the store index's trends. Exit 0 when every cell "
        "met its expectation, 1 otherwise, 3 for a bad plan, a refused --parallel, an "
        "interrupted night or a harness error.")
    nightly.add_argument("plan", type=Path, nargs="?", metavar="PLAN.toml",
                         help="the plan (see docs/nightly.md)")
    nightly.add_argument("--suite", metavar="NAME",
                         help="a plan shipped with kchaos (harness/nightly/suites/NAME.toml); "
                              "'list' lists them")
    nightly.add_argument("--parallel", type=int, metavar="N",
                         help="runs at once, each its own cluster and network (default: the "
                              "plan's `parallel`, else 1); refused when the machine has no "
                              "room")
    nightly.add_argument("--resume", action="store_true",
                         help="continue the latest night of this plan (or --night DIR): "
                              "finished runs are kept, interrupted ones run again")
    nightly.add_argument("--night", type=Path, metavar="DIR",
                         help="the night folder to resume (implies --resume)")
    nightly.add_argument("--store", type=Path, default=Path("store"), metavar="DIR",
                         help="the store (default %(default)s); nights go to DIR/nightly/")
    nightly.add_argument("--spark-master", default="local[*]", metavar="URL",
                         help="Spark master of the night's check (default %(default)s)")
    nightly.set_defaults(handler=_nightly)


def _nightly(args: argparse.Namespace) -> int:
    from harness.nightly.night import NightOptions, run_night
    from harness.nightly.plan import PlanError, suite_path, suites

    if args.suite == "list":
        for name in suites():
            print(name)
        return 0
    if args.parallel is not None and args.parallel < 1:
        print("kchaos nightly: --parallel must be >= 1", flush=True)
        return exit_codes.ERROR
    plan = args.plan
    if args.suite:
        if plan is not None:
            print("kchaos nightly: give a plan file or --suite, not both", flush=True)
            return exit_codes.ERROR
        try:
            plan = suite_path(args.suite)
        except PlanError as error:
            print(f"kchaos nightly: {error}", flush=True)
            return exit_codes.ERROR
    return run_night(NightOptions(plan, args.store, args.parallel,
                                  args.resume or args.night is not None, args.night,
                                  args.spark_master))
