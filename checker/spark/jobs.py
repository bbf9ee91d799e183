"""Histories and files checked on Spark, or in the calling process when that is faster.

Queue histories (`check_history_on_spark`, or many at once with
`check_histories_on_spark`, a night of runs) are analysed on the executors by
`checker.spark.queue` (each history whole in one task, or split by key; the
executors never open a driver's path), then the driver hands each history's
analysis to every `AnalysisChecker` (queue, acks, elections, txn); every
`KeyedChecker` (linearizability) is checked key by key on the executors
(`checker.spark.keyed`: the driver routes the history's unparsed lines to keys,
the executors do the rest), and any other checker (groups, transfer, availability)
runs on the driver with the loaded history, all at the same time.
`check_histories` checks small histories in the calling process instead, unless a
master is given (`IN_PROCESS_BYTES`).

Files of other formats (`check_files_on_spark`) are split as Porcupine splits
them, by partition (P-compositionality): each partition of each file is one
unit, units are dealt into a few Spark partitions balanced by size, and each
executor runs the same pure search as the calling process, with the budgets
enforced inside the task. Executors import only `checker`, shipped to them as
a zip.
"""
from __future__ import annotations

import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
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
from checker.history import Op, Operation, load_history, numbered_ops
from checker.history.errors import HistoryError
from checker.lin.files import FileResult, check_job_partition, load_job, summarise
from checker.lin.search import Budget, PartitionResult
from checker.queue.analysis import AnalysisChecker, QueueAnalysis, check_analysis_safe
from checker.queue.events import read_queue_ops
from checker.queue.finders import QueueBudget
from checker.spark.keyed import check_keyed_on_spark
from checker.spark.queue import HistorySource, is_shared, queue_analyses_on_spark
from checker.spark.session import DEFAULT_MASTER, spark_failures, spark_session

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
    """Check many histories in one Spark job, each job being (test, history source, checkers,
    opts): each history whole in one task, or split by key (see `checked_whole`). One
    Result per job, in order; a malformed history gives its HistoryError in its place and
    the others are still checked. `timings`, if given, receives the seconds spent on the
    histories checked whole (`whole`: parse, validate and analyse), loading those split by
    key (`load`: parse, validate and partition by key) and the rest (`check`)."""
    timings = timings if timings is not None else {}
    started = time.monotonic()
    budgets = [QueueBudget.of(test, opts or {}) for test, _, _, opts in jobs]
    with spark_failures():
        analyses = queue_analyses_on_spark(session, [source for _, source, _, _ in jobs],
                                           budgets, timings)
        shared_seconds = time.monotonic() - started
        outcomes: list[Result | HistoryError] = []
        for (test, source, checkers, opts), analysis in zip(jobs, analyses, strict=True):
            if isinstance(analysis, HistoryError):
                outcomes.append(analysis)
                continue
            begun = time.monotonic()
            result = _run_checkers(session, test, source, checkers, opts or {}, analysis)
            result.seconds = shared_seconds + time.monotonic() - begun
            outcomes.append(result)
    timings["check"] = time.monotonic() - started - timings["whole"] - timings["load"]
    return outcomes


def _run_checkers(session: Any, test: Mapping[str, Any], source: HistorySource,
                  checkers: Mapping[str, Checker] | Composed, opts: Mapping[str, Any],
                  analysis: QueueAnalysis) -> Result:
    """AnalysisCheckers judge the analysis; KeyedCheckers are checked key by key on the
    executors, all of them in one Spark job; any other checker runs on the driver with the
    history, loaded once and only if one needs it. The Spark job and the driver's
    checkers run at the same time, each in a thread."""
    memo = Memo()

    def history() -> list[Op]:
        return memo.get("history", lambda: _driver_history(session, source))

    def lines() -> list[bytes]:
        return memo.get("lines", lambda: _driver_lines(session, source))

    leaves = dict(_leaves(checkers))
    keyed = {path: c for path, c in leaves.items() if isinstance(c, KeyedChecker)}
    on_driver = {path: c for path, c in leaves.items()
                 if not isinstance(c, KeyedChecker | AnalysisChecker)}
    results: dict[tuple[str, ...], Result] = {}
    with ThreadPoolExecutor(max_workers=1 + len(on_driver),
                            thread_name_prefix="kchaos-checker") as pool:
        on_spark = pool.submit(lambda: check_keyed_on_spark(
            session, test, lines(), list(keyed.values()), opts)) if keyed else None
        driven = {path: pool.submit(lambda c=c: check_safe(
            c, test, history(), {**opts, "queue_analysis": analysis, "memo": memo}))
                  for path, c in on_driver.items()}
        for path, checker in leaves.items():
            if isinstance(checker, AnalysisChecker):
                results[path] = check_analysis_safe(checker, test, analysis, opts)
        if on_spark is not None:
            results.update(zip(keyed, on_spark.result(), strict=True))
        results.update((path, future.result()) for path, future in driven.items())
    return _assembled(checkers, results, ())


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


def _driver_history(session: Any, source: HistorySource) -> list[Op]:
    """The ops of a history on the driver: read from its path, or fetched through Spark."""
    if not is_shared(source):
        return load_history(source)
    return [op for _, op in numbered_ops(_driver_lines(session, source), source)]


def _driver_lines(session: Any, source: HistorySource) -> list[bytes]:
    """The lines of a history on the driver, unparsed: read from its path, or fetched
    through Spark."""
    if not is_shared(source):
        return Path(source).read_bytes().split(b"\n")
    data: bytes = session.sparkContext.binaryFiles(source).values().first()
    return data.split(b"\n")


__all__ = [
    "IN_PROCESS_BYTES",
    "check_files_on_spark",
    "check_histories",
    "check_histories_on_spark",
    "check_history_on_spark",
    "in_process",
    "run_units",
]
