"""Checkers on Spark: the only module of `checker` that imports pyspark.

Queue histories (`check_history_on_spark`) are split the same way, by key:
executors parse byte ranges of the history file into per-key events, the
events of each key meet in one task that runs `checker.queue.analyse_key`, and
the driver folds the key reports and hands the analysis to every
`AnalysisChecker` (queue, acks, elections); any other checker runs on the
driver with the loaded history. Executors also validate the history rules
within their range (`checker.history.SliceValidator`) and the driver joins the
ranges in order, so a malformed history fails with the `HistoryError` (line
and reason) that `checker.history.read_history` gives.

Work is split as Porcupine splits it, by partition (P-compositionality): each
partition of each history is one unit, units are dealt into a few Spark
partitions balanced by size, and each executor runs the same pure search as
the calling process, with the budgets enforced inside the task. Executors
import only `checker`, shipped to them as a zip.
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

from checker.checkers import (
    AnalysisChecker,
    Checker,
    Composed,
    Result,
    check_analysis_safe,
    check_safe,
    compose_results,
)
from checker.errors import HistoryError
from checker.files import FileResult, check_job_partition, load_job, summarise
from checker.history import (
    HistoryValidator,
    Operation,
    SliceState,
    SliceValidator,
    load_history,
    op_from_line,
)
from checker.linearizability import Budget, PartitionResult
from checker.queue import (
    RESET,
    KeyReport,
    QueueAnalysis,
    QueueBudget,
    analyse_key,
    events_of,
    fold,
)

DEFAULT_MASTER = "local[*]"

Unit = tuple[int, str, Hashable, list[Operation]]


@contextmanager
def spark_session(master: str = DEFAULT_MASTER, app_name: str = "kchaos") -> Iterator[Any]:
    """A Spark session with `checker` shipped to its executors.

    A session that was already running is reused as it is (the caller that started it
    shipped `checker` and stops it); otherwise it is stopped on exit.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    already_running = SparkSession.getActiveSession() is not None
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


RANGE_BYTES = 16 * 1024 * 1024
META = "\x00meta"
ByteRange = tuple[str, int, int, int]


def check_history_on_spark(
    session: Any,
    test: Mapping[str, Any],
    history_path: str | os.PathLike[str],
    checkers: Mapping[str, Checker] | Composed,
    opts: Mapping[str, Any] | None = None,
    *,
    timings: dict[str, float] | None = None,
) -> Result:
    """Run named checkers (or a `compose`d checker) over a JSONL queue history.

    Returns the composed Result that `compose(checkers).check` gives on the loaded
    history. A malformed history raises HistoryError (file and line).
    `timings`, if given, receives the seconds spent loading (parse, validate and
    partition by key) and checking.
    """
    opts = dict(opts or {})
    path = os.fspath(history_path)
    timings = timings if timings is not None else {}
    started = time.monotonic()
    analysis = queue_analysis_on_spark(session, path, timings, QueueBudget.of(test, opts))
    opts["queue_analysis"] = analysis
    history = functools.cache(lambda: load_history(path))

    def run(checker: Checker) -> Result:
        if isinstance(checker, Composed):
            begun = time.monotonic()
            results = {name: run(c) for name, c in checker.checkers.items()}
            return compose_results(results, time.monotonic() - begun)
        if isinstance(checker, AnalysisChecker):
            return check_analysis_safe(checker, test, analysis, opts)
        return check_safe(checker, test, history(), opts)

    named = checkers.checkers if isinstance(checkers, Composed) else checkers
    results = {name: run(checker) for name, checker in named.items()}
    timings["check"] = time.monotonic() - started - timings["load"]
    return compose_results(results, time.monotonic() - started)


def queue_analysis_on_spark(session: Any, path: str,
                            timings: dict[str, float] | None = None,
                            budget: QueueBudget | None = None) -> QueueAnalysis:
    """The queue analysis of a history file, parsed and checked key by key on executors;
    a key over the budget's events is not gathered at all (its report is unknown)."""
    timings = timings if timings is not None else {}
    budget = budget or QueueBudget()
    deadline = budget.deadline()
    started = time.monotonic()
    context = session.sparkContext
    ranges = _byte_ranges(path, 2 * context.defaultParallelism)
    if not ranges:
        timings["load"] = time.monotonic() - started
        return fold([])
    parsed = context.parallelize(ranges, len(ranges)).mapPartitions(_parse_ranges).persist()
    try:
        meta = parsed.filter(lambda item: item[0] in (META, RESET)).collect()
        resets, sizes = _merge_meta(path, meta)
        timings["load"] = time.monotonic() - started
        if not sizes:
            return fold([])
        over = {key: budget.too_many(key, size) for key, size in sizes.items()}
        refused = [KeyReport(key, unknown=reason) for key, reason in over.items() if reason]
        kept = {key: sizes[key] for key, reason in over.items() if not reason}
        slots = _deal_keys(kept, 2 * context.defaultParallelism) if kept else {}
        shared = context.broadcast(resets)
        reports = refused + ((
            parsed.filter(lambda item: item[0] in slots)
            .groupByKey(max(slots.values()) + 1, lambda key: slots[key])
            .map(lambda item: analyse_key(item[0], [e for part in item[1] for e in part],
                                          shared.value, budget, deadline))
            .collect()
        ) if slots else [])
        shared.unpersist()
    finally:
        parsed.unpersist()
    analysis = fold(reports)
    analysis.seconds = time.monotonic() - started
    return analysis


def _byte_ranges(path: str, at_least: int) -> list[ByteRange]:
    """Split a file at line ends into ranges (path, start, end, first line number)."""
    size = os.path.getsize(path)
    count = max(at_least, -(-size // RANGE_BYTES))
    bounds = [0]
    with open(path, "rb") as source:
        for i in range(1, count):
            source.seek(max(bounds[-1], size * i // count))
            source.readline()
            bounds.append(source.tell())
        bounds.append(size)
        ranges, line = [], 1
        for start, end in zip(bounds, bounds[1:], strict=False):
            if end <= start:
                continue
            ranges.append((path, start, end, line))
            source.seek(start)
            line += source.read(end - start).count(b"\n")
    return ranges


def _parse_ranges(ranges: Iterator[ByteRange]) -> Iterator[tuple[Any, Any]]:
    """Per-key events of some byte ranges; then their resets and a META record holding
    each range's first line and SliceState, and the number of events per key."""
    by_key: dict[Any, list] = {}
    resets: list[tuple[int, Any]] = []
    slices: list[tuple[int, SliceState]] = []
    for path, start, end, first_line in ranges:
        with open(path, "rb") as source:
            source.seek(start)
            lines = source.read(end - start).split(b"\n")
        validator = SliceValidator(path)
        for number, raw in enumerate(lines, first_line):
            if not raw.strip():
                continue
            try:
                op = op_from_line(raw, path, number)
                validator.check(op, number)
                events = events_of(op.index, op.time, op.type, op.process, op.f, op.value,
                                   op.extra)
            except HistoryError as error:
                validator.stop(number, error.reason)
                break
            except ValueError as error:
                validator.stop(number, str(error))
                break
            for key, event in events:
                if key == RESET:
                    resets.append(event)
                else:
                    by_key.setdefault(key, []).append(event)
        slices.append((first_line, validator.state()))
    sizes = {key: len(events) for key, events in by_key.items()}
    yield from by_key.items()
    yield RESET, resets
    yield META, {"slices": slices, "sizes": sizes}


def _merge_meta(path: str, meta: list[tuple[Any, Any]]) -> tuple[dict[Any, list[int]],
                                                                 dict[Any, int]]:
    """Join the ranges' validation in file order (raising the history's first violation),
    then gather resets by process and event counts by key."""
    resets: dict[Any, list[int]] = {}
    sizes: dict[Any, int] = {}
    slices: list[tuple[int, SliceState]] = []
    for kind, body in meta:
        if kind == RESET:
            for index, process in body:
                resets.setdefault(process, []).append(index)
        else:
            slices.extend(body["slices"])
            for key, size in body["sizes"].items():
                sizes[key] = sizes.get(key, 0) + size
    validator = HistoryValidator(path)
    for _, part in sorted(slices, key=lambda item: item[0]):
        validator.join(part)
    for indices in resets.values():
        indices.sort()
    return resets, sizes


def _deal_keys(sizes: dict[Any, int], count: int) -> dict[Any, int]:
    """key -> Spark partition, the largest keys first onto the least loaded partition."""
    loads = [0] * max(1, min(count, len(sizes)))
    slots = {}
    for key in sorted(sizes, key=lambda k: (-sizes[k], repr(k))):
        slot = loads.index(min(loads))
        slots[key] = slot
        loads[slot] += sizes[key]
    return slots


__all__ = [
    "DEFAULT_MASTER",
    "check_files_on_spark",
    "check_history_on_spark",
    "queue_analysis_on_spark",
    "run_units",
    "spark_session",
]
