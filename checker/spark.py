"""Checkers on Spark: the only module of `checker` that imports pyspark.

Queue histories (`check_history_on_spark`) are split the same way, by key:
executors parse byte ranges of the history file into per-key events, the
events of each key meet in one task that runs `checker.queue.analyse_key`, and
the driver folds the key reports and hands the analysis to every checker that
has `check_analysis` (queue, acks, elections); any other checker runs on the
driver with the loaded history.

Work is split as Porcupine splits it, by partition (P-compositionality): each
partition of each history is one unit, units are dealt into a few Spark
partitions balanced by size, and each executor runs the same pure search as
the calling process, with the budgets enforced inside the task. Executors
import only `checker`, shipped to them as a zip.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from checker.checkers import Checker, Result, check_safe, compose_results
from checker.errors import HistoryError
from checker.files import FileJob, FileResult, check_job_partition, load_job, summarise
from checker.history import Op, Operation, load_history, op_from_json
from checker.linearizability import Budget, PartitionResult
from checker.queue import RESET, QueueAnalysis, analyse_key, events_of, fold

DEFAULT_MASTER = "local[*]"

Unit = tuple[int, str, Hashable, list[Operation]]


@contextmanager
def spark_session(master: str = DEFAULT_MASTER, app_name: str = "kchaos") -> Iterator[Any]:
    """A Spark session with `checker` shipped to its executors.

    Stopped on exit unless it was already running (then the caller that started it owns it).
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
    session.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="kchaos-spark-") as scratch:
        session.sparkContext.addPyFile(_zip_package(Path(scratch)))
        try:
            yield session
        finally:
            if not already_running:
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
    checkers: Mapping[str, Checker],
    opts: Mapping[str, Any] | None = None,
    *,
    timings: dict[str, float] | None = None,
) -> Result:
    """Run named checkers over a JSONL queue history; the composed Result.

    A malformed line raises HistoryError (file and line). `timings`, if given,
    receives the seconds spent loading (parse and partition by key) and checking.
    """
    opts = dict(opts or {})
    path = os.fspath(history_path)
    timings = timings if timings is not None else {}
    started = time.monotonic()
    analysis = queue_analysis_on_spark(session, path, timings)
    opts["queue_analysis"] = analysis
    history: list[Op] | None = None
    results: dict[str, Result] = {}
    for name, checker in checkers.items():
        if hasattr(checker, "check_analysis"):
            results[name] = _check_analysis_safely(checker, test, analysis, opts)
        else:
            history = history if history is not None else load_history(path)
            results[name] = check_safe(checker, test, history, opts)
    timings["check"] = time.monotonic() - started - timings["load"]
    return compose_results(results, time.monotonic() - started)


def _check_analysis_safely(checker: Any, test: Mapping[str, Any], analysis: QueueAnalysis,
                           opts: Mapping[str, Any]) -> Result:
    class Adapter:
        def check(self, test: Mapping[str, Any], history: Sequence[Op],
                  opts: Mapping[str, Any]) -> Result:
            return checker.check_analysis(test, analysis, opts)

    return check_safe(Adapter(), test, [], opts)


def queue_analysis_on_spark(session: Any, path: str,
                            timings: dict[str, float] | None = None) -> QueueAnalysis:
    """The queue analysis of a history file, parsed and checked key by key on executors."""
    timings = timings if timings is not None else {}
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
        slots = _deal_keys(sizes, 2 * context.defaultParallelism)
        shared = context.broadcast(resets)
        reports = (
            parsed.filter(lambda item: item[0] not in (META, RESET))
            .groupByKey(max(slots.values()) + 1, lambda key: slots[key])
            .map(lambda item: analyse_key(item[0], [e for part in item[1] for e in part],
                                          shared.value))
            .collect()
        )
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
    """Per-key events of some byte ranges; then their resets and a META record."""
    by_key: dict[Any, list] = {}
    resets: list[tuple[int, Any]] = []
    meta: dict[str, Any] = {"ops": 0, "error": None}
    for path, start, end, first_line in ranges:
        with open(path, "rb") as source:
            source.seek(start)
            lines = source.read(end - start).split(b"\n")
        for number, raw in enumerate(lines, first_line):
            if not raw.strip():
                continue
            try:
                op = op_from_json(json.loads(raw), path, number)
                events = events_of(op.index, op.time, op.type, op.process, op.f, op.value,
                                   op.extra)
            except HistoryError as error:
                meta["error"] = (number, error.reason)
                break
            except ValueError as error:
                meta["error"] = (number, str(error))
                break
            meta["ops"] += 1
            for key, event in events:
                if key == RESET:
                    resets.append(event)
                else:
                    by_key.setdefault(key, []).append(event)
        if meta["error"]:
            break
    meta["sizes"] = {key: len(events) for key, events in by_key.items()}
    yield from by_key.items()
    yield RESET, resets
    yield META, meta


def _merge_meta(path: str, meta: list[tuple[Any, Any]]) -> tuple[dict[Any, list[int]],
                                                                 dict[Any, int]]:
    resets: dict[Any, list[int]] = {}
    sizes: dict[Any, int] = {}
    errors = []
    for kind, body in meta:
        if kind == RESET:
            for index, process in body:
                resets.setdefault(process, []).append(index)
        else:
            if body["error"]:
                errors.append(body["error"])
            for key, size in body["sizes"].items():
                sizes[key] = sizes.get(key, 0) + size
    if errors:
        line, reason = min(errors)
        raise HistoryError(path, line, reason)
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
    "FileJob",
    "check_files_on_spark",
    "check_history_on_spark",
    "queue_analysis_on_spark",
    "run_units",
    "spark_session",
]
