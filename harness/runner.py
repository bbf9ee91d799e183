"""The run, end to end (DESIGN.md, "The run"), written as Jepsen's `run!`: nested scopes.

    store folder and log ─ Spark starting in the background
      └─ cluster (ZooKeeper + brokers) ─ nemesis set up ─ history writer
           └─ workload and faults, then heal, recovery and final reads
      logs collected, cluster down
    checkers on Spark -> results.json ─ report.html and the store index

Each scope owns its teardown, so a normal end, an exception, Ctrl-C and SIGTERM all
leave nothing behind. `check_run` re-runs the checkers on a stored run (`kchaos check`).
Exit codes: 0 valid, 1 anomalies found, 2 unknown, 3 harness error.
"""

from __future__ import annotations

import contextlib
import logging
import platform
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from importlib import metadata
from pathlib import Path
from typing import Any, TextIO

from checker.acks import AcksChecker
from checker.checkers import Result
from checker.elections import ElectionChecker
from checker.history import HistoryWriter
from checker.queue import QueueChecker
from harness.config import TestConfig
from harness.db.cluster import Cluster, ClusterSpec
from harness.progress import ProgressPrinter
from harness.scenarios import Scenario, apply_scenario
from harness.store import (
    HISTORY_FILE,
    LOG_FILE,
    NODES_DIR,
    RESULTS_FILE,
    TEST_FILE,
    create_run,
    read_test,
    write_json,
)
from nemesis.package import Package, Schedule, package
from workloads import generator as gen
from workloads.final import final_phase
from workloads.queue import QueueOptions, queue_workload
from workloads.worker import Interpreter

__all__ = ["EXIT_CODES", "HARNESS_ERROR", "RunOutcome", "check_run", "run_test"]

EXIT_CODES: dict[Any, int] = {True: 0, False: 1, "unknown": 2}
HARNESS_ERROR = 3
log = logging.getLogger("kchaos")


@dataclass(frozen=True)
class RunOutcome:
    run_dir: Path
    exit_code: int
    results: Result | None


class Interrupted(Exception):
    """SIGTERM, turned into an exception so every scope tears down."""


def run_test(config: TestConfig, out: TextIO = sys.stdout) -> RunOutcome:
    """Run one chaos test and return where it is stored and its exit code."""
    config, scenario = apply_scenario(config.with_seed())
    store = Path(config.store)
    run_dir = create_run(store, config.name)
    with _run_log(run_dir / LOG_FILE), _terminate_raises():
        print(f"kchaos: run {run_dir}  (seed {config.seed}"
              + (f", scenario {scenario.name}" if scenario else "") + ")", file=out, flush=True)
        record = _test_record(config, scenario)
        write_json(run_dir / TEST_FILE, record)
        try:
            with _background_spark(config.spark_master) as spark:
                _run_cluster_phase(config, scenario, record, run_dir, out)
                results = _check(spark.session(), run_dir, out)
        except (KeyboardInterrupt, Interrupted) as stop:
            log.error("interrupted: %s", type(stop).__name__)
            print(f"kchaos: interrupted; everything torn down, the history so far is in "
                  f"{run_dir}", file=out, flush=True)
            return RunOutcome(run_dir, HARNESS_ERROR, None)
        except Exception as error:
            log.exception("harness error")
            print(f"kchaos: harness error: {error} (details in {run_dir / LOG_FILE})",
                  file=out, flush=True)
            return RunOutcome(run_dir, HARNESS_ERROR, None)
        _report(store, run_dir, out)
        _summarise(results, run_dir, out)
        return RunOutcome(run_dir, EXIT_CODES[results.valid], results)


def check_run(run_dir: Path, spark_master: str = "local[*]",
              out: TextIO = sys.stdout) -> RunOutcome:
    """Re-run the checkers on a stored run and re-render its report."""
    from checker.spark import spark_session

    with spark_session(spark_master) as session:
        results = _check(session, run_dir, out)
    _report(run_dir.parent.parent, run_dir, out)
    _summarise(results, run_dir, out)
    return RunOutcome(run_dir, EXIT_CODES[results.valid], results)


# --- the cluster phase ------------------------------------------------------------------------


def _run_cluster_phase(config: TestConfig, scenario: Scenario | None, record: dict[str, Any],
                       run_dir: Path, out: TextIO) -> None:
    started = time.monotonic()
    spec = ClusterSpec(brokers=config.nodes, zookeepers=config.zookeepers,
                       colocate=config.colocate, broker_config=dict(config.broker_config),
                       backend=config.backend, options=config.cluster_options())
    with Cluster.up(spec) as cluster:
        print(f"kchaos: cluster up in {time.monotonic() - started:.1f} s: "
              f"{cluster.bootstrap_servers}", file=out, flush=True)
        log.info("cluster %s up: %s", cluster.prefix, cluster.processes())
        try:
            _run_workload(config, scenario, record, cluster, run_dir, out)
        finally:
            copied = cluster.collect_logs(run_dir / NODES_DIR)
            log.info("collected %d node log files", len(copied))


def _run_workload(config: TestConfig, scenario: Scenario | None, record: dict[str, Any],
                  cluster: Cluster, run_dir: Path, out: TextIO) -> None:
    workload = queue_workload(QueueOptions(
        bootstrap_servers=tuple(cluster.bootstrap_servers.split(",")), client=config.client,
        keys=config.keys, concurrency=config.concurrency, rate=config.rate,
        replication_factor=config.replication_factor, acks=config.acks,
        idempotence=config.idempotence, retries=config.retries, linger_ms=config.linger_ms,
        op_timeout=config.op_timeout, seed=config.seed))
    faults = _nemesis_package(config, scenario)
    test = {**record, **dict(workload.test_fields),
            "key_partitions": {str(k): list(v) for k, v in workload.key_partitions.items()},
            "node_broker_ids": {node: cluster.broker_id(node) for node in cluster.brokers},
            "bootstrap_servers": cluster.bootstrap_servers, "cluster_prefix": cluster.prefix,
            "nodes": {node: cluster.remote.address(node) for node in cluster.nodes}}
    clock = _Clock()
    with HistoryWriter(run_dir / HISTORY_FILE, clock=clock) as history:
        interpreter = Interpreter(test, workload.client, history,
                                  concurrency=workload.concurrency,
                                  nemesis=_ClusterNemesis(faults, cluster), nodes=cluster.brokers,
                                  op_timeout=config.op_timeout, clock=clock)
        interpreter.setup_clients()
        faults.nemesis.setup(cluster)
        try:
            generator = gen.phases(
                gen.time_limit(config.time_limit, gen.any_of(gen.clients(workload.generator),
                                                             gen.nemesis(faults.generator))),
                final_phase(faults.final_generator, workload.final_generator,
                            config.recovery_seconds, config.final_read_seconds))
            clock.start()
            write_json(run_dir / TEST_FILE, {**test, "start_wall_ms": clock.start_wall_ms})
            print(f"kchaos: {config.time_limit:g} s of {config.client} clients "
                  f"({workload.concurrency} threads, {config.keys} keys, acks={config.acks}) "
                  f"with faults: {', '.join(faults.faults) or 'none'}", file=out, flush=True)
            with ProgressPrinter(interpreter.progress.snapshot, config.time_limit):
                interpreter.run(generator)
        finally:
            faults.nemesis.teardown(cluster)
        with contextlib.suppress(Exception):
            interpreter.teardown_clients()


def _nemesis_package(config: TestConfig, scenario: Scenario | None) -> Package:
    if scenario is None:
        return package(config.nemesis, config.seed, config.time_limit, config.nemesis_interval)
    staged = package(scenario.faults, config.seed, config.time_limit)
    return replace(staged, generator=Schedule(scenario.schedule(config)))


class _ClusterNemesis:
    """The interpreter's nemesis (`invoke(test, op)`) over a package acting on the cluster."""

    def __init__(self, faults: Package, cluster: Cluster) -> None:
        self.faults = faults
        self.cluster = cluster

    def invoke(self, test: Any, op: dict) -> dict:
        result = self.faults.nemesis.invoke(self.cluster, op)
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


def _check(session: Any, run_dir: Path, out: TextIO) -> Result:
    from checker.spark import check_history_on_spark

    started = time.monotonic()
    checkers = {"queue": QueueChecker(), "acks": AcksChecker(), "elections": ElectionChecker()}
    results = check_history_on_spark(session, read_test(run_dir), run_dir / HISTORY_FILE,
                                     checkers, {"store_dir": str(run_dir)})
    write_json(run_dir / RESULTS_FILE, results.to_json())
    print(f"kchaos: checked in {time.monotonic() - started:.1f} s", file=out, flush=True)
    return results


def _report(store: Path, run_dir: Path, out: TextIO) -> None:
    from reports import write_index, write_report

    try:
        report = write_report(run_dir)
        write_index(store)
    except Exception as error:
        log.exception("report failed")
        print(f"kchaos: the report could not be written: {error}", file=out, flush=True)
        return
    print(f"kchaos: report {report.path}", file=out, flush=True)


def _summarise(results: Result, run_dir: Path, out: TextIO) -> None:
    verdict = {True: "VALID", False: "INVALID", "unknown": "UNKNOWN"}[results.valid]
    print(f"kchaos: {verdict}", file=out)
    for name, checker in results.checkers.items():
        found = ", ".join(f"{kind} {a.count}" for kind, a in checker.anomalies.items())
        allowed = f"  (allowed by the configuration: {', '.join(checker.allowed)})" \
            if checker.allowed else ""
        error = f"  error: {checker.error}" if checker.error else ""
        print(f"  {name:<10} {str(checker.valid):<8} {found or 'no anomalies'}{allowed}{error}",
              file=out)
    print(f"kchaos: results in {run_dir / RESULTS_FILE}", file=out, flush=True)


# --- scopes -----------------------------------------------------------------------------------


class _BackgroundSpark:
    """A Spark session started in a thread while the test runs (it takes seconds)."""

    def __init__(self, master: str) -> None:
        from checker.spark import spark_session

        self._manager = spark_session(master)
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
def _background_spark(master: str) -> Iterator[_BackgroundSpark]:
    spark = _BackgroundSpark(master)
    try:
        yield spark
    finally:
        spark.stop()


@contextlib.contextmanager
def _run_log(path: Path) -> Iterator[None]:
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
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


def _test_record(config: TestConfig, scenario: Scenario | None) -> dict[str, Any]:
    """test.json: the full configuration, seed and versions; the runner adds cluster facts."""
    return {
        "name": config.name,
        "seed": config.seed,
        "scenario": scenario.name if scenario else None,
        "config": config.to_json(),
        "broker_config": dict(config.broker_config),
        "acks": config.acks,
        "time_limit": config.time_limit,
        "nemesis": config.nemesis,
        "final_reads": True,
        "versions": _versions(),
    }


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("kchaos", "confluent-kafka", "kafka-python", "kazoo", "pyspark"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[name] = metadata.version(name)
    return versions
