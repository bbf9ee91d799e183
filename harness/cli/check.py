"""`kchaos check` (stored runs) and `kchaos check-history` (bare queue histories);
`kchaos check-lin` is harness/cli/check_lin.py."""

from __future__ import annotations

import argparse
import json
import re
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checker.core import Composed, Result
from checker.history import NEMESIS, Op
from checker.history.errors import HistoryError
from checker.history.formats import QUEUE_FORMATS
from checker.registry import FAULTS_CHECKER, NEED_NODE_LOGS, checker_names, composed
from harness import exit_codes
from harness.db.kchaos import KchaosOptions
from harness.options import ConfigError, Declared, add_arguments, declared, layered
from workloads.registry import WORKLOADS

__all__ = ["add_commands"]

CONTRACT = ("acks", "broker_config")
# Ops only a consumer-group history holds.
GROUP_FS = frozenset({"subscribe", "committed"})


def add_commands(commands: argparse._SubParsersAction) -> None:
    check = commands.add_parser(
        "check", help="re-run the checkers on stored runs",
        description="Check stored runs again (each results.json and report is rewritten). "
        "Exit 0 valid, 1 anomalies found, 2 unknown, 3 input error.")
    check.add_argument("run_dirs", type=Path, nargs="+", metavar="STORE_DIR",
                       help="a run folder, a test folder or the store (follows 'latest'); "
                            "several are checked together in one Spark job")
    check.add_argument("--spark-master", metavar="URL",
                       help="Spark master (default local[*], or this process for small "
                            "histories)")
    check.add_argument("--shared-store", action="store_true",
                       help="the store is at the same path on every Spark executor (a shared "
                            "file system): executors read the histories themselves instead "
                            "of receiving them from this process")
    check.set_defaults(handler=_check)

    bare = commands.add_parser(
        "check-history", help="check bare queue history files (no run folder)",
        description="Check history files of a Kafka queue test, ours (JSONL) or Jepsen's "
        "(EDN), with the workload's checkers; several files are checked together in one "
        "Spark job. The contract defaults to the safe configuration (acks=all, "
        "min.insync.replicas=2, unclean election off). A FILE path is read by this process, "
        "which sends its lines to the Spark executors; a FILE given as a URL (file://, "
        "hdfs://, s3a://) must be reachable from every executor, which read it themselves "
        "with Spark's reader (JSONL only, not with --local). Exit 0 valid, 1 anomalies "
        "found, 2 unknown, 3 input error.")
    bare.add_argument("files", nargs="+", metavar="FILE",
                      help="a history path, or a URL every Spark executor can read")
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
    where.add_argument("--spark-master", metavar="URL",
                       help="Spark master (default local[*], or this process for small "
                            "histories)")
    where.add_argument("--local", action="store_true", help="check in this process, without Spark")
    bare.add_argument("--json", metavar="OUT", type=Path,
                      help="write the results as JSON (of several files: {\"files\": [...]})")
    bare.set_defaults(handler=_check_history)


# --- check ------------------------------------------------------------------------------------


def _check(args: argparse.Namespace) -> int:
    from checker.spark import SparkJobFailed
    from harness.runner import check_runs
    from harness.store import resolve_run

    try:
        run_dirs = [resolve_run(run_dir) for run_dir in args.run_dirs]
        outcomes = check_runs(run_dirs, args.spark_master, shared_store=args.shared_store)
    except (FileNotFoundError, SparkJobFailed) as error:
        print(f"kchaos check: {error}", file=sys.stderr)
        return exit_codes.ERROR
    return exit_codes.worst(outcome.exit_code for outcome in outcomes)


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
    from checker.spark import in_process
    from checker.spark.sources import is_shared

    started = time.monotonic()
    try:
        test = _contract(args)
        given = checker_names(args.checker) if args.checker else None
        urls = [file for file in args.files if is_shared(file)]
        if urls and (args.local or args.format not in ("auto", "jsonl")):
            raise ValueError(f"{urls[0]}: a URL is read by the Spark executors as JSONL; it "
                             f"cannot go with --local or --format {args.format}")
    except (ConfigError, ValueError) as error:
        print(f"kchaos check-history: {error}", file=sys.stderr)
        return exit_codes.ERROR
    checked: dict[str, Result | Exception] = {}
    loaded: dict[str, list[Op]] = {}
    for file in args.files:
        if not is_shared(file):
            try:
                loaded[file] = _read_input(file, args.format)
            except InputError as error:
                checked[file] = error
    todo = [file for file in args.files if file not in checked]
    jobs: dict[str, tuple[dict[str, Any], Composed]] = {}
    for file in todo:
        names = given or _default_checkers(args.workload, loaded.get(file))
        jobs[file] = ({**test, "checkers": list(names)}, composed(names))
        told = (f"{len(loaded[file])} ops from {file}" if file in loaded
                else f"{file} is read by the Spark executors")
        print(f"kchaos: {told}; checkers {', '.join(names)}", file=sys.stderr, flush=True)
    if args.local or (todo and in_process(todo, args.spark_master)):
        checked.update({file: jobs[file][1].check(jobs[file][0], loaded[file], {})
                        for file in todo})
    elif todo:
        from checker.spark import SparkJobFailed

        try:
            checked.update(_check_on_spark(jobs, loaded, args.spark_master))
        except SparkJobFailed as error:
            print(f"kchaos check-history: {error}", file=sys.stderr)
            if urls:
                print(f"kchaos check-history: a history given as a URL must be readable from "
                      f"every Spark executor: {', '.join(urls)}", file=sys.stderr)
            return exit_codes.ERROR
    return _finish(args.files, checked, args.json, time.monotonic() - started)


class InputError(Exception):
    """A history file that cannot be checked: one line naming the file, what is wrong and
    the format expected."""


_JSON_ARRAY = re.compile(rb"\A\s*\[\s*(\{\s*\"|\])")


def _read_input(file: str, fmt: str) -> list[Op]:
    """The ops of the queue history `file`; InputError when it is missing, unreadable,
    binary, empty, a JSON array or malformed."""
    from checker.queue.events import read_queue_ops

    expected = EXPECTED.get(fmt, EXPECTED["auto"])
    try:
        with open(file, "rb") as handle:
            head = handle.read(4096)
        if not head.strip():
            raise InputError(f"{file}: empty file, no operations ({expected})")
        if b"\0" in head or not _is_text(head):
            raise InputError(f"{file}: a binary file, not text ({expected})")
        if _JSON_ARRAY.match(head):
            raise InputError(f"{file}: a JSON array ({expected}; not one array)")
        ops = read_queue_ops(Path(file), fmt)
    except FileNotFoundError:
        raise InputError(f"{file}: no such file ({expected})") from None
    except IsADirectoryError:
        raise InputError(f"{file}: a folder, not a history file ({expected})") from None
    except OSError as error:
        raise InputError(f"{file}: cannot be read: {error.strerror} ({expected})") from None
    except ValueError as error:
        raise InputError(f"{' '.join(str(error).split())} ({expected})") from None
    if not ops:
        raise InputError(f"{file}: empty history, no operations ({expected})")
    return ops


EXPECTED = {
    "auto": "expected a queue history: JSONL, one JSON op per line, or Jepsen's EDN",
    "jsonl": "expected JSONL, one JSON op per line",
    "edn": "expected Jepsen's EDN, one op map per line or one vector of them",
}


def _is_text(head: bytes) -> bool:
    """Whether the start of a file decodes as UTF-8 (a character cut at its end aside)."""
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as error:
        return error.start >= len(head) - 3
    return True


def _default_checkers(workload: str, history: Sequence[Op] | None) -> tuple[str, ...]:
    """The workload's checkers (those that need the nodes' logs aside), following what the
    history holds: `txn` when it holds transactions, `groups` only when it holds
    consumer-group ops, `transfer` only when it holds transactions (a checker with
    nothing to check answers "unknown") and `faults` when it holds nemesis ops. A history
    the Spark executors read (None) gets the workload's."""
    names = [name for name in WORKLOADS[workload].checkers if name not in NEED_NODE_LOGS]
    if history is None:
        return tuple(names)
    transactions = any(op.f == "txn" for op in history)
    groups = any(op.f in GROUP_FS or "group" in op.extra for op in history)
    names = [name for name in names if (name != "transfer" or transactions)
             and (name != "groups" or groups)]
    if "txn" not in names and transactions:
        names.append("txn")
    if "groups" not in names and groups:
        names.append("groups")
    if FAULTS_CHECKER not in names and any(op.process == NEMESIS for op in history):
        names.append(FAULTS_CHECKER)
    return tuple(names)


def _check_on_spark(jobs: dict[str, tuple[dict[str, Any], Composed]],
                    loaded: dict[str, list[Op]], master: str | None
                    ) -> dict[str, Result | HistoryError]:
    """Check the files (each with its test record and checkers) in one Spark job: those
    read here as JSONL (so Jepsen's EDN too), URLs as they are."""
    from checker.history import write_jsonl
    from checker.spark import DEFAULT_MASTER, check_histories_on_spark, spark_session
    from harness.cli.spark_output import spark_output

    with tempfile.TemporaryDirectory(prefix="kchaos-history-") as scratch:
        sources: list[str | Path] = []
        for number, file in enumerate(jobs):
            if file in loaded:
                sources.append(Path(scratch) / f"{number}.jsonl")
                write_jsonl(loaded[file], sources[-1])
            else:
                sources.append(file)
        with spark_output() as log, spark_session(master or DEFAULT_MASTER, log=log) as session:
            results = check_histories_on_spark(session, [
                (test, source, checker, {})
                for (test, checker), source in zip(jobs.values(), sources, strict=True)])
    return dict(zip(jobs, results, strict=True))


def _finish(files: list[str], checked: dict[str, Result | Exception], json_path: Path | None,
            seconds: float) -> int:
    bodies = []
    states: dict[str, str | None] = {}
    for file in files:
        outcome = checked[file]
        if len(files) > 1:
            print(f"== {file}")
        if isinstance(outcome, Exception):
            print(f"kchaos check-history: {outcome}", file=sys.stderr)
            bodies.append({"file": file, "error": str(outcome)})
            continue
        from reports.summary import headline, run_state, summary_lines  # matplotlib: only now

        for line in summary_lines(outcome, colour=sys.stdout.isatty()):
            print(line)
        body = outcome.to_json()
        state = run_state(body)
        states[file] = state
        bodies.append({"file": file, "valid": body["valid"], "state": state, **body,
                       "summary": headline(body)})
    if not all(isinstance(outcome, Exception) for outcome in checked.values()):
        print(f"kchaos: checked in {seconds:.1f} s")
    codes = [exit_codes.ERROR if isinstance(checked[file], Exception)
             else exit_codes.for_state(states[file]) for file in files]
    if json_path is not None and (len(files) > 1 or codes[0] != exit_codes.ERROR):
        document = {"files": bodies} if len(files) > 1 else {
            key: value for key, value in bodies[0].items() if key != "file"}
        json_path.write_text(json.dumps(document, indent=1, default=repr) + "\n")
        print(f"kchaos: results in {json_path}")
    return exit_codes.worst(codes)
