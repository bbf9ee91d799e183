"""`kchaos nightly PLAN.toml | --suite NAME`: a night of chaos runs (harness.nightly);
`kchaos nightly-report NIGHT`: its figures as a Markdown page (reports.figures)."""

from __future__ import annotations

import argparse
import shlex
import sys
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
    report = commands.add_parser(
        "nightly-report", help="write a checked night's figures as a Markdown page",
        description="Write the figures of a checked night (its cells: seeds found, median "
        "time to first anomaly, runs valid, ops/s, availability) as Markdown, with the "
        "night, its plan, the machine and the kchaos commit it ran, and this command. The "
        "pages of docs/results/ are written by it. Exit 3 when NIGHT is not a checked "
        "night folder.")
    report.add_argument("night", type=Path, metavar="NIGHT",
                        help="a night folder, store/nightly/<date>")
    report.add_argument("--markdown", type=Path, metavar="FILE",
                        help="write the page to FILE (default: standard output)")
    report.set_defaults(handler=_nightly_report)


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


def _nightly_report(args: argparse.Namespace) -> int:
    from harness.nightly.state import load_night
    from reports.figures import night_markdown

    try:
        night = load_night(args.night)
    except FileNotFoundError as error:
        print(f"kchaos nightly-report: {error}; give a folder of store/nightly/",
              file=sys.stderr)
        return exit_codes.ERROR
    if not night.state.get("checked") or not night.state.get("outcomes"):
        print(f"kchaos nightly-report: {args.night} has not been checked; "
              f"`kchaos nightly --night {args.night}` finishes and checks it",
              file=sys.stderr)
        return exit_codes.ERROR
    command = "kchaos nightly-report " + shlex.quote(str(args.night))
    if args.markdown is not None:
        command += " --markdown " + shlex.quote(str(args.markdown))
    page = night_markdown(night.state, command, str(args.night))
    if args.markdown is None:
        sys.stdout.write(page)
        return 0
    try:
        args.markdown.parent.mkdir(parents=True, exist_ok=True)
        args.markdown.write_text(page, encoding="utf-8")
    except OSError as error:
        print(f"kchaos nightly-report: cannot write {args.markdown}: {error}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"kchaos nightly-report: wrote {args.markdown}")
    return 0
