"""Histories and files checked on Spark, or in the calling process when that is faster.

Histories (`check_history_on_spark`, or many at once with `check_histories_on_spark`, a
night of runs) are read on the driver (a path, or a shared URL fetched through Spark: the
executors never open a driver's path), parsed and validated once as
`checker.queue.events.read_queue_ops` does. Then every `KeyedChecker` is checked key by
key on the executors, each kind of checker one Spark job over the keys of all histories,
the jobs at once (`checker.spark.keyed`): linearizability, and the queue analysis that
the `AnalysisChecker`s (queue, acks, elections, txn) share, as one `AnalysisCheckers`. Any
other checker (groups, transfer, availability) runs on the driver with the loaded
history at the same time. `check_histories` checks small histories in the calling process
instead, unless a master is given (`IN_PROCESS_BYTES`).

Files of other formats (`check_files_on_spark`) are split as Porcupine splits
them, by partition (P-compositionality): each partition of each file is one
unit, units are dealt into a few Spark partitions balanced by size, and each
executor runs the same pure search as the calling process, with the budgets
enforced inside the task. Executors import only `checker`, shipped to them as
a zip.
"""
from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.core import (
    Checker,
    Composed,
    KeyedChecker,
    Memo,
    Result,
    check_safe,
    compose,
    compose_results,
)
from checker.history import Op, Operation, numbered_ops
from checker.history.errors import HistoryError
from checker.lin.files import FileResult, check_job_partition, load_job, summarise
from checker.lin.search import Budget, PartitionResult
from checker.queue.analysis import AnalysisChecker, AnalysisCheckers
from checker.queue.events import read_queue_ops, validated_queue_ops
from checker.spark.keyed import KeyedTask, check_keyed_on_spark
from checker.spark.session import DEFAULT_MASTER, spark_failures, spark_session
from checker.spark.sources import HistorySource, history_lines, is_shared

Unit = tuple[int, str, Hashable, list[Operation]]

# Below this many bytes of JSONL history in all, the calling process checks before Spark
# would have started and checked. Measured with `bench/spark_checkers.py --threshold 5 20
# 80 240` (`kchaos check-history`, fresh processes, 2 cores under a load of about 22): in
# process 11.0, 9.4, 15.5 and 24.3 s for 0.5, 1.9, 7.8 and 23.7 MB, on Spark local[*]
# 135, 105, 92 and 86 s; so about 11 s + 0.55 s/MB against a fixed 80 s or more. On the
# idle machine (bench/spark_many_histories.py) one process checks 4.5 MB/s, local[2]
# about 8.4 MB/s after a 7.5 s start: they meet near 70 MB. 32 MB stays below both
# crossings and bounds the memory of a history loaded whole.
IN_PROCESS_BYTES = 32_000_000


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


def in_process(sources: Sequence[HistorySource], master: str | None) -> bool:
    """Whether to check these histories in the calling process rather than start Spark: no
    master was asked for, every history is a local file, and together they are smaller
    than IN_PROCESS_BYTES."""
    if master is not None or any(is_shared(source) for source in sources):
        return False
    return sum(Path(source).stat().st_size for source in sources) < IN_PROCESS_BYTES


def check_histories(jobs: Sequence[HistoryJob], master: str | None = None, *,
                    session: Callable[[], Any] | None = None, log: Path | None = None,
                    timings: dict[str, float] | None = None) -> list[Result | HistoryError]:
    """What `check_histories_on_spark` gives, checked where it is fastest: in the calling
    process when `in_process` says so, else on Spark (the session `session()` gives, or a
    new one of `master`, DEFAULT_MASTER by default, its JVM's output in `log`)."""
    if in_process([source for _, source, _, _ in jobs], master):
        return [_check_here(*job) for job in jobs]
    if session is not None:
        return check_histories_on_spark(session(), jobs, timings=timings)
    with spark_session(master or DEFAULT_MASTER, log=log) as started:
        return check_histories_on_spark(started, jobs, timings=timings)


def _check_here(test: Mapping[str, Any], source: HistorySource,
                checkers: Mapping[str, Checker] | Composed,
                opts: Mapping[str, Any] | None) -> Result | HistoryError:
    started = time.monotonic()
    try:
        history = read_queue_ops(Path(source), "jsonl")
    except HistoryError as error:
        return error
    named = checkers if isinstance(checkers, Composed) else compose(checkers)
    result = named.check(test, history, opts or {})
    result.seconds = time.monotonic() - started
    return result


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
    """Check many histories, each job being (test, history source, checkers, opts), the
    keys of all of them in one Spark job. One Result per job, in order; a malformed history
    gives its HistoryError in its place and the others are still checked. `timings`, if
    given, receives the seconds spent reading, parsing and validating the histories on the
    driver (`load`) and checking them (`check`)."""
    timings = timings if timings is not None else {}
    started = time.monotonic()
    with spark_failures():
        loaded = [_load(session, source) for _, source, _, _ in jobs]
        timings["load"] = time.monotonic() - started
        plans = [None if isinstance(ops, HistoryError) else _plan(checkers)
                 for (_, _, checkers, _), ops in zip(jobs, loaded, strict=True)]
        tasks: list[KeyedTask] = []
        driven: list[tuple[int, tuple[str, ...], Checker]] = []
        histories: dict[int, list[Op]] = {}
        for number, ((test, _, _, opts), ops, plan) in enumerate(
                zip(jobs, loaded, plans, strict=True)):
            if plan is not None and not isinstance(ops, HistoryError):
                histories[number] = ops
                tasks.append((test, ops, list(plan.keyed.values()), opts or {}))
                driven.extend((number, path, c) for path, c in plan.on_driver.items())
        memos = {number: Memo() for number in histories}
        with ThreadPoolExecutor(max_workers=1 + min(len(driven), DRIVER_THREADS),
                                thread_name_prefix="kchaos-checker") as pool:
            on_spark = pool.submit(check_keyed_on_spark, session, tasks)
            futures = [pool.submit(check_safe, c, jobs[number][0], histories[number],
                                   {**(jobs[number][3] or {}), "memo": memos[number]})
                       for number, _, c in driven]
            keyed = iter(on_spark.result())
            found: list[dict[tuple[str, ...], Result]] = [{} for _ in jobs]
            for number, plan in enumerate(plans):
                if plan is not None:
                    found[number].update(_unpacked(plan, next(keyed)))
            for (number, path, _), future in zip(driven, futures, strict=True):
                found[number][path] = future.result()
    outcomes: list[Result | HistoryError] = []
    for (_, _, checkers, _), ops, results in zip(jobs, loaded, found, strict=True):
        if isinstance(ops, HistoryError):
            outcomes.append(ops)
            continue
        result = _assembled(checkers, results, ())
        result.seconds = time.monotonic() - started
        outcomes.append(result)
    timings["check"] = time.monotonic() - started - timings["load"]
    return outcomes


# At most this many driver checkers (groups, transfer, availability) run at once.
DRIVER_THREADS = 4
ANALYSIS = ("\x00analysis",)


def _load(session: Any, source: HistorySource) -> list[Op] | HistoryError:
    """The ops of a JSONL queue history, validated as `read_queue_ops` validates them, or
    its HistoryError."""
    name = os.fspath(source)
    try:
        return validated_queue_ops(numbered_ops(history_lines(session, source), name), name)
    except HistoryError as error:
        return error


@dataclass(frozen=True)
class _Plan:
    """Where each checker of a job runs: `keyed` on the executors (the AnalysisCheckers as
    one `AnalysisCheckers` under ANALYSIS, listed last: a search's keys take seconds each,
    the analysis's far less, so the searches' Spark jobs start first), `on_driver` in this
    process; `analysed` names the AnalysisCheckers' paths."""

    keyed: dict[tuple[str, ...], KeyedChecker]
    on_driver: dict[tuple[str, ...], Checker]
    analysed: tuple[tuple[str, ...], ...]


def _plan(checkers: Mapping[str, Checker] | Composed) -> _Plan:
    leaves = dict(_leaves(checkers))
    analysed = {path: c for path, c in leaves.items() if isinstance(c, AnalysisChecker)}
    keyed: dict[tuple[str, ...], KeyedChecker] = {
        path: c for path, c in leaves.items() if isinstance(c, KeyedChecker)}
    if analysed:
        keyed[ANALYSIS] = AnalysisCheckers({"/".join(path): c for path, c in analysed.items()})
    on_driver = {path: c for path, c in leaves.items()
                 if not isinstance(c, KeyedChecker | AnalysisChecker)}
    return _Plan(keyed, on_driver, tuple(analysed))


def _unpacked(plan: _Plan, results: Sequence[Result]) -> dict[tuple[str, ...], Result]:
    """The keyed checkers' results by path, the AnalysisCheckers' taken out of their
    composed Result (or each given its error, when the analysis as a whole failed)."""
    found = dict(zip(plan.keyed, results, strict=True))
    analysis = found.pop(ANALYSIS, None)
    if analysis is not None:
        for path in plan.analysed:
            found[path] = analysis.checkers.get("/".join(path), analysis)
    return found


def _leaves(checkers: Mapping[str, Checker] | Composed, path: tuple[str, ...] = ()
            ) -> Iterator[tuple[tuple[str, ...], Checker]]:
    """Every checker under its path of names, composed ones opened."""
    named = checkers.checkers if isinstance(checkers, Composed) else checkers
    for name, checker in named.items():
        if isinstance(checker, Composed):
            yield from _leaves(checker, (*path, name))
        else:
            yield (*path, name), checker


def _assembled(checkers: Mapping[str, Checker] | Composed,
               results: Mapping[tuple[str, ...], Result], path: tuple[str, ...]) -> Result:
    """The composed Result of the leaves' results, nested as the checkers are."""
    named = checkers.checkers if isinstance(checkers, Composed) else checkers
    composed = {name: _assembled(c, results, (*path, name)) if isinstance(c, Composed)
                else results[(*path, name)] for name, c in named.items()}
    return compose_results(composed, max((r.seconds for r in composed.values()), default=0.0))


__all__ = [
    "IN_PROCESS_BYTES",
    "check_files_on_spark",
    "check_histories",
    "check_histories_on_spark",
    "check_history_on_spark",
    "in_process",
    "run_units",
]
