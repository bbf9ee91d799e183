"""The run, end to end (docs/architecture.md), written as Jepsen's `run!`: nested scopes.

    store folder and log ─ Spark starting in the background
      └─ db up (test.db) ─ history writer ─ clients set up ─ nemesis set up
           └─ workload and faults, then heal, recovery and final reads
      logs collected, db down
    test.checker on Spark -> results.json ─ report.html and the store index

`run_test(test)` knows only the parts of a `harness.test.Test`. Each scope owns its
teardown, so a normal end, an exception, Ctrl-C and SIGTERM all leave nothing behind.
`check_runs` re-runs the checkers named in stored runs' test.json (`kchaos check`), all
in one Spark job.
"""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from checker.core import Result
from checker.history import HistoryWriter, read_history
from checker.history.errors import HistoryError
from checker.registry import composed
from harness import exit_codes
from harness.db.part import RunningDB
from harness.progress import ProgressPrinter
from harness.store import (
    CLIENT_LOG_FILE,
    HISTORY_FILE,
    LOG_FILE,
    NODES_DIR,
    RESULTS_FILE,
    SPARK_LOG_FILE,
    TEST_FILE,
    create_run,
    index_store,
    read_test,
    run_files,
    write_json,
    write_progress,
)
from nemesis.package import Package
from reports.summary import headline, run_state, summary_lines
from workloads.core import generator as gen
from workloads.core.client import CLIENT_LOGGERS
from workloads.core.final import FINAL_READS_DONE, final_phase
from workloads.core.part import WorkloadContext
from workloads.core.worker import Interpreter
from workloads.registry import WORKLOADS

if TYPE_CHECKING:
    from harness.test import Test

__all__ = ["RunOutcome", "check_run", "check_runs", "run_test"]

log = logging.getLogger("kchaos")


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    exit_code: int
    results: Result | None


class Interrupted(Exception):
    """SIGTERM, turned into an exception so every scope tears down."""


def run_test(test: Test, out: TextIO = sys.stdout) -> RunOutcome:
    """Run one chaos test and return where it is stored and its exit code."""
    run_dir = create_run(test.store, test.name)
    with _run_log(run_dir / LOG_FILE), _terminate_raises():
        print(f"kchaos: run {run_dir}  (seed {test.seed}"
              + (f", scenario {test.scenario}" if test.scenario else "") + ")", file=out,
              flush=True)
        record = test.record()
        write_json(run_dir / TEST_FILE, record)
        try:
            if not test.check:
                _run_db_phase(test, record, run_dir, out)
                print(f"kchaos: history and node logs stored in {run_dir}, not checked "
                      f"(no_check; `kchaos check {run_dir}` checks it)", file=out, flush=True)
                return RunOutcome(run_dir, exit_codes.VALID, None)
            with _spark_for_check(test.spark_master, run_dir / SPARK_LOG_FILE) as session:
                _run_db_phase(test, record, run_dir, out)
                results = _check(session, test, run_dir, out)
        except (KeyboardInterrupt, Interrupted) as stop:
            log.error("interrupted: %s", type(stop).__name__)
            print(f"kchaos: interrupted; everything torn down, the history so far is in "
                  f"{run_dir}", file=out, flush=True)
            return RunOutcome(run_dir, exit_codes.ERROR, None)
        except Exception as error:
            log.exception("harness error")
            print(f"kchaos: harness error: {error} (details in {run_dir / LOG_FILE})",
                  file=out, flush=True)
            return RunOutcome(run_dir, exit_codes.ERROR, None)
        _report(test.store, run_dir, out)
        _summarise(results, run_dir, out)
        return RunOutcome(run_dir, _exit_code(results), results)


def check_run(run_dir: Path, spark_master: str | None = None,
              out: TextIO | None = None) -> RunOutcome:
    """Re-run the checkers of a stored run and re-render its report."""
    [outcome] = check_runs([run_dir], spark_master, out)
    return outcome


def check_runs(run_dirs: Sequence[Path], spark_master: str | None = None,
               out: TextIO | None = None, *, shared_store: bool = False) -> list[RunOutcome]:
    """Re-run the checkers of stored runs in one Spark job (the keys of all their histories
    spread over the executors together), then write each run's results and report.

    With `shared_store`, the store is at the same path on every executor, which then reads
    each history itself (a `file://` URL) instead of receiving it from the driver. Without
    a master, small histories are checked in this process (`checker.spark.in_process`).
    """
    from checker.spark import check_histories

    out = out or sys.stdout
    checked: dict[Path, Result | HistoryError] = {}
    jobs, good = [], []
    for run_dir in run_dirs:
        test = read_test(run_dir)
        names = test.get("checkers") or WORKLOADS[test.get("workload", "queue")].checkers
        history = run_dir / HISTORY_FILE
        try:
            for _ in read_history(history):
                pass
        except HistoryError as error:
            checked[run_dir] = error
            continue
        source = history.resolve().as_uri() if shared_store else history
        jobs.append((test, source, composed(names), {"store_dir": str(run_dir)}))
        good.append(run_dir)
    if jobs:
        started = time.monotonic()
        checked.update(zip(good, check_histories(jobs, spark_master,
                                                 log=good[0] / SPARK_LOG_FILE), strict=True))
        print(f"kchaos: checked {len(jobs)} run(s) in {time.monotonic() - started:.1f} s",
              file=out, flush=True)
    return [_record(run_dir, checked[run_dir], out) for run_dir in run_dirs]


def _record(run_dir: Path, results: Result | HistoryError, out: TextIO) -> RunOutcome:
    """Write a re-checked run's results and report; a malformed history removes them."""
    if isinstance(results, HistoryError):
        (run_dir / RESULTS_FILE).unlink(missing_ok=True)
        print(f"kchaos: {results}; the earlier results are removed, the report says why",
              file=out, flush=True)
        _report(run_dir.parent.parent, run_dir, out)
        return RunOutcome(run_dir, exit_codes.ERROR, None)
    _write_results(run_dir, results)
    _report(run_dir.parent.parent, run_dir, out)
    _summarise(results, run_dir, out)
    return RunOutcome(run_dir, _exit_code(results), results)


# --- the db phase -----------------------------------------------------------------------------


def _run_db_phase(test: Test, record: dict[str, Any], run_dir: Path, out: TextIO) -> None:
    started = time.monotonic()
    with test.db.start(run_dir / NODES_DIR) as db:
        print(f"kchaos: {test.db.name} up in {time.monotonic() - started:.1f} s: "
              f"{db.bootstrap_servers}", file=out, flush=True)
        log.info("db %s up: %s", db.prefix, db.processes())
        try:
            _run_workload(test, record, db, run_dir, out)
        finally:
            copied = db.collect_logs(run_dir / NODES_DIR)
            log.info("collected %d node log files", len(copied))


def _run_workload(test: Test, record: dict[str, Any], db: RunningDB, run_dir: Path,
                  out: TextIO) -> None:
    """The client phase; its progress (the db's facts, the workload's fields, the start
    time, then the final reads done) goes to progress.json as it is reached."""
    workload = test.workload.build(WorkloadContext(
        tuple(db.bootstrap_servers.split(",")), len(db.brokers), test.seed))
    faults = test.nemesis
    progress = {**dict(workload.test_fields),
                "key_partitions": {str(k): list(v) for k, v in workload.key_partitions.items()},
                **db.facts(), "final_reads": False}
    write_progress(run_dir, progress)
    record = {**record, **progress}
    clock = _Clock()
    with HistoryWriter(run_dir / HISTORY_FILE, clock=clock) as history:
        interpreter = Interpreter(record, workload.client, history,
                                  concurrency=workload.concurrency,
                                  nemesis=_DBNemesis(faults, db), nodes=db.brokers,
                                  op_timeout=workload.op_timeout, clock=clock)
        with _clients(interpreter):
            faults.consumers.attach(workload)
            with _faults(faults, db):
                generator = gen.phases(
                    gen.time_limit(test.time_limit,
                                   gen.any_of(gen.clients(workload.generator),
                                              gen.nemesis(faults.generator))),
                    final_phase(faults.final_generator, workload.final_generator,
                                test.recovery_seconds, test.final_read_seconds))
                clock.start()
                progress["start_wall_ms"] = clock.start_wall_ms
                write_progress(run_dir, progress)
                print(f"kchaos: {test.time_limit:g} s of the {test.workload.name} workload "
                      f"({_describe(workload.test_fields)}, {workload.concurrency} threads) "
                      f"with faults: {', '.join(faults.faults) or 'none'}", file=out, flush=True)
                if faults.note:
                    print(f"kchaos: note: {faults.note}", file=out, flush=True)
                with _client_logs(run_dir / CLIENT_LOG_FILE) as client_lines, \
                        ProgressPrinter(lambda: {**interpreter.progress.snapshot(),
                                                 "elapsed": clock() / 1e9,
                                                 "client_log_lines": client_lines.count},
                                        test.time_limit):
                    interpreter.run(generator)
                drained = FINAL_READS_DONE in interpreter.marks
                if not drained:
                    print(f"kchaos: note: the final reads did not finish within "
                          f"--final-read-seconds {test.final_read_seconds:g} s, so writes no "
                          "read saw are not judged lost; raise --final-read-seconds",
                          file=out, flush=True)
                write_progress(run_dir, {**progress, "final_reads": drained})


def _describe(fields: Mapping[str, Any]) -> str:
    return ", ".join(f"{name}={value}" for name, value in fields.items())


class _DBNemesis:
    """The interpreter's nemesis (`invoke(test, op)`) over a package acting on the db."""

    def __init__(self, faults: Package, db: RunningDB) -> None:
        self.faults = faults
        self.db = db

    def invoke(self, test: Any, op: Mapping[str, Any]) -> dict[str, Any]:
        result = self.faults.nemesis.invoke(self.db, dict(op))
        log.info("nemesis %s %s -> %s", op.get("f"), op.get("value"), result.get("value"))
        return result


class _Clock:
    """Nanoseconds since the test started (the history's times); 0 until `start`."""

    def __init__(self) -> None:
        self.started_ns: int | None = None
        self.start_wall_ms = 0

    def start(self) -> None:
        self.started_ns = time.monotonic_ns()
        self.start_wall_ms = time.time_ns() // 1_000_000

    def __call__(self) -> int:
        return 0 if self.started_ns is None else time.monotonic_ns() - self.started_ns


# --- checking and reporting -------------------------------------------------------------------


def _check(session: Callable[[], Any] | None, test: Test, run_dir: Path,
           out: TextIO) -> Result:
    """Check the run's history on the background session (when a master was asked for), or
    in this process when it is small, else on a session started now."""
    from checker.spark import check_histories

    started = time.monotonic()
    [results] = check_histories([(read_test(run_dir), run_dir / HISTORY_FILE,
                                  test.checker.checkers, {"store_dir": str(run_dir)})],
                                test.spark_master, session=session,
                                log=run_dir / SPARK_LOG_FILE)
    if isinstance(results, HistoryError):
        raise results
    _write_results(run_dir, results)
    print(f"kchaos: checked in {time.monotonic() - started:.1f} s", file=out, flush=True)
    return results


def _write_results(run_dir: Path, results: Result) -> None:
    """results.json: the checkers' results, the run's state beside Jepsen's "valid", and
    the headline."""
    body = results.to_json()
    write_json(run_dir / RESULTS_FILE, {"valid": body["valid"], "state": run_state(body),
                                        **body, "summary": headline(body)})


def _exit_code(results: Result) -> int:
    return exit_codes.for_state(run_state(results.to_json()))


def _report(store: Path, run_dir: Path, out: TextIO) -> None:
    from reports import write_report

    try:
        report = write_report(run_files(run_dir))
        index_store(store)
    except Exception as error:
        log.exception("report failed")
        print(f"kchaos: the report could not be written: {error}", file=out, flush=True)
        return
    print(f"kchaos: report {report.path}", file=out, flush=True)


def _summarise(results: Result, run_dir: Path, out: TextIO) -> None:
    for line in summary_lines(results, colour=out.isatty()):
        print(line, file=out)
    print(f"kchaos: results in {run_dir / RESULTS_FILE}", file=out, flush=True)


# --- scopes -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _clients(interpreter: Interpreter) -> Iterator[None]:
    """The clients' setup (topics) and, whatever happens inside, their teardown (which ends
    the consumer child processes); a teardown that fails is logged, never raised over the
    error that may be on its way out."""
    interpreter.setup_clients()
    try:
        yield
    finally:
        try:
            interpreter.teardown_clients()
        except Exception:
            log.exception("client teardown failed")


@contextlib.contextmanager
def _faults(faults: Package, db: RunningDB) -> Iterator[None]:
    """The nemesis set up on the db and, whatever happens inside, torn down (healed)."""
    faults.nemesis.setup(db)
    try:
        yield
    finally:
        faults.nemesis.teardown(db)


class _BackgroundSpark:
    """A Spark session started in a thread while the test runs (it takes seconds)."""

    def __init__(self, master: str | None, log: Path) -> None:
        from checker.spark import DEFAULT_MASTER, spark_session

        self._manager = spark_session(master or DEFAULT_MASTER, log=log)
        self._ready = threading.Event()
        self._session: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, name="spark-start", daemon=True)
        self._thread.start()

    def _start(self) -> None:
        try:
            self._session = self._manager.__enter__()
        except BaseException as error:
            self._error = error
        finally:
            self._ready.set()

    def session(self) -> Any:
        self._ready.wait()
        if self._error is not None:
            raise RuntimeError(f"Spark did not start: {self._error}") from self._error
        return self._session

    def stop(self) -> None:
        self._ready.wait()
        if self._session is not None:
            self._manager.__exit__(None, None, None)


@contextlib.contextmanager
def _spark_for_check(master: str | None, log: Path
                     ) -> Iterator[Callable[[], Any] | None]:
    """With a master, a session started in the background while the test runs, as a
    callable that waits for it; without one, None: most runs' histories are checked in
    this process (`checker.spark.in_process`), and a JVM started for nothing would take
    the run's cores and a long stop."""
    if master is None:
        yield None
        return
    spark = _BackgroundSpark(master, log)
    try:
        yield spark.session
    finally:
        spark.stop()


def _file_handler(path: Path) -> logging.FileHandler:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    return handler


@contextlib.contextmanager
def _run_log(path: Path) -> Iterator[None]:
    handler = _file_handler(path)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
        handler.close()


class _LineCounter(logging.Handler):
    """Counts the records it sees (for the progress line)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += 1


@contextlib.contextmanager
def _client_logs(path: Path) -> Iterator[_LineCounter]:
    """The client libraries' logs go to `path`, not the terminal nor kchaos.log."""
    handler = _file_handler(path)
    counter = _LineCounter()
    loggers = [logging.getLogger(name) for name in CLIENT_LOGGERS]
    previous = [(logger.propagate, logger.level) for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        logger.addHandler(counter)
        logger.propagate = False
        logger.setLevel(logging.INFO)
    try:
        yield counter
    finally:
        for logger, (propagate, level) in zip(loggers, previous, strict=True):
            logger.removeHandler(handler)
            logger.removeHandler(counter)
            logger.propagate, logger.level = propagate, level
        handler.close()


@contextlib.contextmanager
def _terminate_raises() -> Iterator[None]:
    """SIGTERM raises `Interrupted` in the main thread while the run is in progress."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise Interrupted(signal.Signals(signum).name)

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
