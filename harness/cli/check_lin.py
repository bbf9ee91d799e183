"""`kchaos check-lin`: linearizability of Porcupine, Knossos, Jepsen and kchaos history files.

Kept apart from the other commands, and light: with `--local` it imports the
checker and nothing that starts Spark, talks to Kafka, plots or reads the
harness configuration, so it starts in a fraction of a second.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from checker.lin.files import FORMAT_NAMES, MODEL_NAMES, FileResult, check_files
from checker.lin.search import DEFAULT_BUDGET_SECONDS, DEFAULT_MAX_CONFIGURATIONS, Budget
from harness import exit_codes

__all__ = ["add_commands"]


def add_commands(commands: argparse._SubParsersAction) -> None:
    lin = commands.add_parser(
        "check-lin",
        help="check histories for linearizability",
        description="Check history files for linearizability. Exit 0 when all are linearizable, "
        "1 when one is not, 2 when one is unknown (budget spent), 3 on an input error.",
    )
    lin.add_argument("files", nargs="+", metavar="FILE")
    lin.add_argument("--format", choices=FORMAT_NAMES, default="auto")
    lin.add_argument("--model", choices=MODEL_NAMES, default="auto")
    lin.add_argument("--complete", action="store_true",
                     help="decide every partition instead of stopping at the first invalid one")
    lin.add_argument("--budget-seconds", type=_positive_float, default=DEFAULT_BUDGET_SECONDS,
                     help="time budget per partition (default %(default)s)")
    lin.add_argument("--budget-configurations", type=_positive_int,
                     default=DEFAULT_MAX_CONFIGURATIONS,
                     help="memo budget per partition and search (default %(default)s)")
    where = lin.add_mutually_exclusive_group()
    where.add_argument("--spark-master", metavar="URL", default=None,
                       help="Spark master URL (default local[*])")
    where.add_argument("--local", action="store_true", help="check in this process, without Spark")
    lin.add_argument("--json", metavar="OUT", type=Path, help="write the results as JSON")
    lin.set_defaults(handler=_check_lin)


def _check_lin(args: argparse.Namespace) -> int:
    budget = Budget(seconds=args.budget_seconds, max_configurations=args.budget_configurations)
    started = time.monotonic()
    if args.local:
        _print_header()
        results = check_files(args.files, fmt=args.format, model=args.model,
                              complete=args.complete, budget=budget, progress=_print_row)
    else:
        from checker.spark import DEFAULT_MASTER, check_files_on_spark, spark_session
        from harness.cli.spark_output import spark_output

        master = args.spark_master or DEFAULT_MASTER
        print(f"starting Spark ({master}) ...", file=sys.stderr, flush=True)
        with spark_output() as log, spark_session(master, log=log) as session:
            print(f"Spark ready after {time.monotonic() - started:.1f} s; checking "
                  f"{len(args.files)} file(s)", file=sys.stderr, flush=True)
            results = check_files_on_spark(session, args.files, fmt=args.format,
                                           model=args.model, complete=args.complete,
                                           budget=budget)
        _print_header()
        for result in results:
            _print_row(result)
    _print_summary(results, time.monotonic() - started)
    if args.json:
        args.json.write_text(json.dumps({"files": [r.to_json() for r in results]}, indent=1,
                                        default=repr) + "\n")
    return exit_codes.for_files(results)


_ROW = "{:<40} {:>7} {:>10} {:<9} {:>9}"


def _print_header() -> None:
    print(_ROW.format("file", "ops", "partitions", "verdict", "seconds"))


def _print_row(result: FileResult) -> None:
    verdict = {True: "valid", False: "INVALID", "unknown": "unknown", None: "ERROR"}[result.valid]
    print(_ROW.format(_shorten(result.path, 40), result.ops, result.partitions, verdict,
                      f"{result.seconds:.3f}"), flush=True)
    if result.error:
        print(f"    error: {result.error}", flush=True)
    for partition in result.partition_results:
        if partition.valid == "unknown":
            print(f"    partition {partition.partition!r}: unknown: {partition.reason}", flush=True)
        elif partition.valid is False and partition.counterexample:
            stuck = partition.counterexample
            what = "; ".join(stuck.descriptions.get(i, str(i)) for i in stuck.stuck)
            print(f"    partition {partition.partition!r}: cannot linearize op {stuck.stuck} "
                  f"{what} after {len(stuck.prefix)} ops, in state {stuck.state}", flush=True)


def _print_summary(results: Sequence[FileResult], seconds: float) -> None:
    counts = {label: 0 for label in ("valid", "invalid", "unknown", "error")}
    for result in results:
        label = {True: "valid", False: "invalid", "unknown": "unknown", None: "error"}[result.valid]
        counts[label] += 1
    summary = ", ".join(f"{n} {label}" for label, n in counts.items() if n)
    print(f"{len(results)} file(s): {summary}; {seconds:.2f} s")


def _shorten(text: str, width: int) -> str:
    return text if len(text) <= width else "..." + text[-(width - 3):]


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _positive_int(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value
