"""Checkers on Spark: the only module of `checker` that imports pyspark.

Work is split as Porcupine splits it, by partition (P-compositionality): each
partition of each history is one unit, units are dealt into a few Spark
partitions balanced by size, and each executor runs the same pure search as
the calling process, with the budgets enforced inside the task. Executors
import only `checker`, shipped to them as a zip.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from checker.files import FileJob, FileResult, check_job_partition, load_job, summarise
from checker.history import Operation
from checker.linearizability import Budget, PartitionResult

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


__all__ = ["DEFAULT_MASTER", "FileJob", "check_files_on_spark", "run_units", "spark_session"]
