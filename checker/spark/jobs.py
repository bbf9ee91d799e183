"""Checkers on Spark: the only module of `checker` that imports pyspark.

Queue histories (`check_history_on_spark`, or many at once with
`check_histories_on_spark`, a night of runs) are analysed on the executors by
`checker.spark.queue` (each history whole in one task, or split by key; the
executors never open a driver's path), then the driver hands each history's
analysis to every `AnalysisChecker` (queue, acks, elections, txn); any other
checker runs on the driver with the loaded history.

Files of other formats (`check_files_on_spark`) are split as Porcupine splits
them, by partition (P-compositionality): each partition of each file is one
unit, units are dealt into a few Spark partitions balanced by size, and each
executor runs the same pure search as the calling process, with the budgets
enforced inside the task. Executors import only `checker`, shipped to them as
a zip.
"""
from __future__ import annotations

import functools
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from checker.core import Checker, Composed, Result, check_safe, compose_results
from checker.history import Op, Operation, load_history, numbered_ops
from checker.history.errors import HistoryError
from checker.lin.files import FileResult, check_job_partition, load_job, summarise
from checker.lin.search import Budget, PartitionResult
from checker.queue.analysis import AnalysisChecker, QueueAnalysis, check_analysis_safe
from checker.queue.finders import QueueBudget
from checker.spark.queue import HistorySource, is_shared, queue_analyses_on_spark

DEFAULT_MASTER = "local[*]"

Unit = tuple[int, str, Hashable, list[Operation]]


@contextmanager
def spark_session(master: str = DEFAULT_MASTER, app_name: str = "kchaos") -> Iterator[Any]:
    """A Spark session with `checker` shipped to its executors.

    A session that was already running, started by any thread, is reused as it is (the
    caller that started it shipped `checker` and stops it); otherwise it is stopped on exit.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    already_running = _session_running()
    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    if already_running:
        yield session
        return
    session.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="kchaos-spark-") as scratch:
        session.sparkContext.addPyFile(_zip_package(Path(scratch)))
        try:
            yield session
        finally:
            session.stop()


def _session_running() -> bool:
    """Whether a session runs in this process: active in this thread, or the default one
    another thread started (`getActiveSession` sees only this thread's)."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        SparkSession.active()
    except PySparkRuntimeError:
        return False
    return True


def _zip_package(directory: Path) -> str:
    package = Path(__file__).resolve().parent
    archive = shutil.make_archive(str(directory / "checker"), "zip", root_dir=package.parent,
                                  base_dir=package.name)
    return archive


def check_files_on_spark(
    session: Any,
    paths: Sequence[str],
    *,
    fmt: str = "auto",
    model: str = "auto",
    complete: bool = False,
    budget: Budget | None = None,
) -> list[FileResult]:
    """Check many files at once; every partition of every file is a Spark work unit."""
    budget = budget or Budget()
    jobs = [load_job(path, fmt, model) for path in paths]
    units: list[Unit] = [
        (index, job.model, key, ops)
        for index, job in enumerate(jobs)
        for key, ops in job.partitions
    ]
    results = run_units(session, units, budget)
    by_job: dict[int, list[PartitionResult]] = {i: [] for i in range(len(jobs))}
    for index, result in results:
        by_job[index].append(result)
    return [summarise(job, by_job[i], complete) for i, job in enumerate(jobs)]


def run_units(session: Any, units: Sequence[Unit],
              budget: Budget) -> list[tuple[int, PartitionResult]]:
    """Check every unit on the executors; returns (file index, result) pairs."""
    if not units:
        return []
    context = session.sparkContext
    slices = _deal(units, max(1, min(len(units), 2 * context.defaultParallelism)))
    rdd = context.parallelize(slices, len(slices))
    return rdd.flatMap(lambda chunk: _check_chunk(chunk, budget)).collect()


def _deal(units: Sequence[Unit], count: int) -> list[list[Unit]]:
    """Deal units, largest first, into `count` slices of similar total size."""
    slices: list[list[Unit]] = [[] for _ in range(count)]
    sizes = [0] * count
    for unit in sorted(units, key=lambda u: len(u[3]), reverse=True):
        smallest = sizes.index(min(sizes))
        slices[smallest].append(unit)
        sizes[smallest] += len(unit[3])
    return [s for s in slices if s]


def _check_chunk(chunk: list[Unit], budget: Budget) -> list[tuple[int, PartitionResult]]:
    return [(index, check_job_partition(model, key, ops, budget))
            for index, model, key, ops in chunk]


HistoryJob = tuple[Mapping[str, Any], HistorySource, Mapping[str, Checker] | Composed,
                   Mapping[str, Any] | None]


def check_history_on_spark(
    session: Any,
    test: Mapping[str, Any],
    history: HistorySource,
    checkers: Mapping[str, Checker] | Composed,
    opts: Mapping[str, Any] | None = None,
    *,
    timings: dict[str, float] | None = None,
) -> Result:
    """Run named checkers (or a `compose`d checker) over a JSONL queue history (a path, or a
    shared URL: see `is_shared`).

    Returns the composed Result that `compose(checkers).check` gives on the loaded
    history. A malformed history raises HistoryError (file and line).
    `timings`: see `check_histories_on_spark`.
    """
    [outcome] = check_histories_on_spark(session, [(test, history, checkers, opts)],
                                         timings=timings)
    if isinstance(outcome, HistoryError):
        raise outcome
    return outcome


def check_histories_on_spark(session: Any, jobs: Sequence[HistoryJob], *,
                             timings: dict[str, float] | None = None
                             ) -> list[Result | HistoryError]:
    """Check many histories in one Spark job, each job being (test, history source, checkers,
    opts): each history whole in one task, or split by key (see `checked_whole`). One
    Result per job, in order; a malformed history gives its HistoryError in its place and
    the others are still checked. `timings`, if given, receives the seconds spent on the
    histories checked whole (`whole`: parse, validate and analyse), loading those split by
    key (`load`: parse, validate and partition by key) and the rest (`check`)."""
    timings = timings if timings is not None else {}
    started = time.monotonic()
    budgets = [QueueBudget.of(test, opts or {}) for test, _, _, opts in jobs]
    with _spark_failures():
        analyses = queue_analyses_on_spark(session, [source for _, source, _, _ in jobs],
                                           budgets, timings)
        shared_seconds = time.monotonic() - started
        outcomes: list[Result | HistoryError] = []
        for (test, source, checkers, opts), analysis in zip(jobs, analyses, strict=True):
            if isinstance(analysis, HistoryError):
                outcomes.append(analysis)
                continue
            begun = time.monotonic()
            result = _run_checkers(session, test, source, checkers,
                                   {**(opts or {}), "queue_analysis": analysis}, analysis)
            result.seconds = shared_seconds + time.monotonic() - begun
            outcomes.append(result)
    timings["check"] = time.monotonic() - started - timings["whole"] - timings["load"]
    return outcomes


class SparkJobFailed(RuntimeError):
    """A Spark job failed, e.g. because an executor could not read a shared history; the
    message is Spark's reason."""


@contextmanager
def _spark_failures() -> Iterator[None]:
    """Spark's Java errors (py4j's, which carry the `java_exception`) as SparkJobFailed,
    with the first line of Spark's reason; any other error goes through."""
    try:
        yield
    except Exception as error:
        java = getattr(error, "java_exception", None)
        if java is None:
            raise
        raise SparkJobFailed(str(java.toString()).splitlines()[0]) from None


def _run_checkers(session: Any, test: Mapping[str, Any], source: HistorySource,
                  checkers: Mapping[str, Checker] | Composed, opts: dict[str, Any],
                  analysis: QueueAnalysis) -> Result:
    """AnalysisCheckers get the analysis; any other checker the history, loaded on the
    driver only if one needs it."""
    history = functools.cache(lambda: _driver_history(session, source))

    def run(checker: Checker) -> Result:
        if isinstance(checker, Composed):
            begun = time.monotonic()
            results = {name: run(c) for name, c in checker.checkers.items()}
            return compose_results(results, time.monotonic() - begun)
        if isinstance(checker, AnalysisChecker):
            return check_analysis_safe(checker, test, analysis, opts)
        return check_safe(checker, test, history(), opts)

    named = checkers.checkers if isinstance(checkers, Composed) else checkers
    return compose_results({name: run(checker) for name, checker in named.items()})


def _driver_history(session: Any, source: HistorySource) -> list[Op]:
    """The ops of a history on the driver: read from its path, or fetched through Spark."""
    if not is_shared(source):
        return load_history(source)
    data = session.sparkContext.binaryFiles(source).values().first()
    return [op for _, op in numbered_ops(data.split(b"\n"), source)]


__all__ = [
    "DEFAULT_MASTER",
    "SparkJobFailed",
    "check_files_on_spark",
    "check_histories_on_spark",
    "check_history_on_spark",
    "run_units",
    "spark_session",
]
