"""The `kchaos` command line."""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from checker.errors import HistoryError
from checker.files import FORMAT_NAMES, MODEL_NAMES, FileResult, check_files, exit_code
from checker.linearizability import DEFAULT_BUDGET_SECONDS, DEFAULT_MAX_CONFIGURATIONS, Budget
from harness.cluster_cli import add_cluster_commands
from harness.report_cli import add_report_commands
from harness.run_cli import add_run_commands

INPUT_ERROR = 3


class _Parser(argparse.ArgumentParser):
    """Usage errors are input errors: exit 3, as the check commands document."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(INPUT_ERROR, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kchaos", description="Chaos testing for Kafka-style replicated logs.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

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
                     help="memo budget per partition (default %(default)s)")
    where = lin.add_mutually_exclusive_group()
    where.add_argument("--spark-master", metavar="URL", default=None,
                       help="Spark master URL (default local[*])")
    where.add_argument("--local", action="store_true", help="check in this process, without Spark")
    lin.add_argument("--json", metavar="OUT", type=Path, help="write the results as JSON")
    lin.set_defaults(handler=_check_lin)

    history = commands.add_parser("history", help="history utilities")
    history_commands = history.add_subparsers(dest="history_command", required=True,
                                              parser_class=_Parser)
    export = history_commands.add_parser("export", help="convert a history to Jepsen's EDN")
    export.add_argument("history", metavar="HISTORY")
    export.add_argument("--format", choices=FORMAT_NAMES, default="auto")
    export.add_argument("--edn", metavar="FILE", required=True, help="output file, - for stdout")
    export.set_defaults(handler=_export_history)
    add_run_commands(commands)
    add_cluster_commands(commands)
    add_report_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)


# --- check-lin --------------------------------------------------------------------------------


def _check_lin(args: argparse.Namespace) -> int:
    budget = Budget(seconds=args.budget_seconds, max_configurations=args.budget_configurations)
    started = time.monotonic()
    if args.local:
        _print_header()
        results = check_files(args.files, fmt=args.format, model=args.model,
                              complete=args.complete, budget=budget, progress=_print_row)
    else:
        from checker.spark import DEFAULT_MASTER, check_files_on_spark, spark_session

        master = args.spark_master or DEFAULT_MASTER
        print(f"starting Spark ({master}) ...", file=sys.stderr, flush=True)
        with spark_session(master) as session:
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
    return exit_code(results)


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


# --- history export ---------------------------------------------------------------------------


def _export_history(args: argparse.Namespace) -> int:
    from checker.formats import read_ops
    from checker.history import write_edn

    try:
        ops = read_ops(args.history, args.format)
    except (HistoryError, OSError) as error:
        print(f"kchaos: {error}", file=sys.stderr)
        return INPUT_ERROR
    if args.edn == "-":
        write_edn(ops, sys.stdout)
    else:
        with open(args.edn, "w", encoding="utf-8") as out:
            write_edn(ops, out)
        print(f"wrote {len(ops)} ops to {args.edn}", file=sys.stderr)
    return 0


# --- argument types ---------------------------------------------------------------------------


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


if __name__ == "__main__":
    sys.exit(main())
