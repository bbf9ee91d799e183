"""`kchaos check` (a stored run), `kchaos check-history` (a bare queue history) and
`kchaos check-lin` (linearizability of Porcupine, Knossos and Jepsen files)."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checker.checkers import Result
from checker.errors import HistoryError
from checker.files import FORMAT_NAMES, MODEL_NAMES, FileResult, check_files
from checker.formats import QUEUE_FORMATS
from checker.linearizability import DEFAULT_BUDGET_SECONDS, DEFAULT_MAX_CONFIGURATIONS, Budget
from checker.registry import NEED_NODE_LOGS, checker_names, composed
from harness import exit_codes
from harness.config import ConfigError
from harness.db.kchaos import KchaosOptions
from harness.options import Declared, add_arguments, declared, layered
from reports.layout import resolve_run
from reports.summary import headline, summary_lines
from workloads.registry import WORKLOADS

__all__ = ["add_commands"]

CONTRACT = ("acks", "broker_config")


def add_commands(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check", help="re-run the checkers on a stored run",
        description="Check a stored run again (results.json and the report are rewritten). "
        "Exit 0 valid, 1 anomalies found, 2 unknown, 3 input error.")
    check.add_argument("run_dir", type=Path, metavar="STORE_DIR",
                       help="a run folder, a test folder or the store (follows 'latest')")
    check.add_argument("--spark-master", metavar="URL", default="local[*]")
    check.set_defaults(handler=_check)

    bare = commands.add_parser(
        "check-history", help="check a bare queue history file (no run folder)",
        description="Check a history file of a Kafka queue test, ours (JSONL) or Jepsen's "
        "(EDN), with the workload's checkers. The contract defaults to the safe "
        "configuration (acks=all, min.insync.replicas=2, unclean election off). Exit 0 "
        "valid, 1 anomalies found, 2 unknown, 3 input error.")
    bare.add_argument("file", type=Path, metavar="FILE")
    bare.add_argument("--workload", choices=tuple(WORKLOADS), default="queue",
                      help="the workload that wrote the history (default %(default)s)")
    bare.add_argument("--checker", metavar="A,B,...",
                      help="checkers to run (default: the workload's, except those that read "
                           "the nodes' logs of a run folder, such as elections)")
    bare.add_argument("--format", choices=("auto", *QUEUE_FORMATS), default="auto",
                      help="history format (default %(default)s: by content)")
    add_arguments(bare.add_argument_group("the contract the history is checked against"),
                  _contract_options())
    where = bare.add_mutually_exclusive_group()
    where.add_argument("--spark-master", metavar="URL", help="Spark master (default local[*])")
    where.add_argument("--local", action="store_true", help="check in this process, without Spark")
    bare.add_argument("--json", metavar="OUT", type=Path, help="write the results as JSON")
    bare.set_defaults(handler=_check_history)

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


# --- check ------------------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    from harness.runner import check_run

    try:
        run_dir = resolve_run(args.run_dir)
    except FileNotFoundError as error:
        print(f"kchaos check: {error}", file=sys.stderr)
        return exit_codes.ERROR
    return check_run(run_dir, args.spark_master).exit_code


# --- check-history ----------------------------------------------------------------------------


def _contract_options() -> list[Declared]:
    """--acks and --broker-config as the workloads and the kchaos db declare them."""
    found: dict[str, Declared] = {}
    for options in [kind.options for kind in WORKLOADS.values()] + [KchaosOptions]:
        for option in declared(options):
            if option.name in CONTRACT:
                found.setdefault(option.name, option)
    return list(found.values())


def _contract(args: argparse.Namespace) -> dict[str, Any]:
    """The test record the checkers read: acks and broker_config over the safe defaults."""
    options = _contract_options()
    return {"workload": args.workload, **{option.name: option.default for option in options},
            **layered(options, [("command line", vars(args))])}


def _check_history(args: argparse.Namespace) -> int:
    from checker.formats import read_queue_ops
    from checker.history import write_jsonl

    started = time.monotonic()
    try:
        test = _contract(args)
        names = checker_names(args.checker) if args.checker else tuple(
            name for name in WORKLOADS[args.workload].checkers if name not in NEED_NODE_LOGS)
        checker = composed(names)
        ops = read_queue_ops(args.file, args.format)
    except (ConfigError, ValueError, HistoryError, OSError) as error:
        print(f"kchaos check-history: {error}", file=sys.stderr)
        return exit_codes.ERROR
    test["checkers"] = list(names)
    print(f"kchaos: {len(ops)} ops from {args.file}; checkers {', '.join(names)}",
          file=sys.stderr, flush=True)
    if args.local:
        results = checker.check(test, ops, {})
    else:
        from checker.spark import DEFAULT_MASTER, check_history_on_spark, spark_session

        with tempfile.TemporaryDirectory(prefix="kchaos-history-") as scratch:
            path = Path(scratch) / "history.jsonl"
            write_jsonl(ops, path)
            with spark_session(args.spark_master or DEFAULT_MASTER) as session:
                results = check_history_on_spark(session, test, path, checker, {})
    return _finish(results, args.json, time.monotonic() - started)


def _finish(results: Result, json_path: Path | None, seconds: float) -> int:
    for line in summary_lines(results):
        print(line)
    print(f"kchaos: checked in {seconds:.1f} s")
    if json_path is not None:
        body = results.to_json()
        json_path.write_text(json.dumps({**body, "summary": headline(body)}, indent=1,
                                        default=repr) + "\n")
        print(f"kchaos: results in {json_path}")
    return exit_codes.for_verdict(results.valid)


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


