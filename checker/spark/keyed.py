"""Any `KeyedChecker` (checker.core) on Spark: each kind of checker one Spark job over the
keys of every history, the jobs running at once.

The driver splits each history, given as its ops (parsed and validated once), with each
checker; each (history, checker, key) part is one unit, pickled on the driver and loaded
on the executor with the garbage collector paused (`checker.history.bulk`). The checkers
of one class (the linearizability search, the queue analysis, ...) are one Spark job:
their units are dealt, largest first, into Spark partitions, one unit each up to
`MAX_TASKS`, so that slow keys spread over the executors as they free up. The jobs are
submitted one after another in the order the tasks list their checkers, each as soon as
its own split is done, and Spark's FIFO scheduler gives a free executor to the earliest
job that has a unit left: so the costliest checker, listed first, starts first, and the
others fill the executors it leaves idle. Each executor runs the checker's pure
`check_key`, and the driver merges each checker's answers in key order; a checker's
Result takes the seconds from its split to its merge. A split, a key or a merge that
crashes makes that checker's result "unknown" with the error, as `check_safe` does in the
calling process. This module works on the SparkContext it is given and imports no pyspark.
"""

from __future__ import annotations

import pickle
import time
from collections.abc import Hashable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from checker.core import KeyedChecker, Result, describe_error, safely
from checker.history import Op, collector_paused

__all__ = ["MAX_TASKS", "KeyedTask", "check_keyed_on_spark"]

MAX_TASKS = 256

# (test, the history's ops, its keyed checkers, opts)
KeyedTask = tuple[Mapping[str, Any], Sequence[Op], Sequence[KeyedChecker],
                  Mapping[str, Any]]
# (task number, checker number): one checker of one history
Member = tuple[int, int]
# (task number, checker number, key position, key, the part pickled)
Unit = tuple[int, int, int, Hashable, bytes]
# (task number, checker number, key position, key, checked, answer or error)
Answer = tuple[int, int, int, Hashable, bool, Any]


def check_keyed_on_spark(session: Any, tasks: Sequence[KeyedTask]) -> list[list[Result]]:
    """For each task, each of its checkers' Result, as its `check` gives in the calling
    process, with the keys of each kind of checker checked on the executors in one Spark
    job, the jobs at once."""
    kinds: dict[type, list[Member]] = {}
    for task, (_, _, checkers, _) in enumerate(tasks):
        for number, checker in enumerate(checkers):
            kinds.setdefault(type(checker), []).append((task, number))
    results: dict[Member, Result] = {}
    with ThreadPoolExecutor(max_workers=max(1, len(kinds)),
                            thread_name_prefix="kchaos-keyed") as pool:
        running: list[Future[dict[Member, Result]]] = []
        for members in kinds.values():
            started = time.monotonic()
            units, split, failed = _split(tasks, members)
            results.update(failed)
            running.append(pool.submit(_checked, session, tasks, units, split, started))
        for future in running:
            results.update(future.result())
    return [[results[(task, number)] for number in range(len(checkers))]
            for task, (_, _, checkers, _) in enumerate(tasks)]


def _split(tasks: Sequence[KeyedTask], members: Sequence[Member]
           ) -> tuple[list[Unit], list[Member], dict[Member, Result]]:
    """The units of these checkers, those that split, and the unknown Result of each that
    did not (its split crashed or a part does not pickle)."""
    units: list[Unit] = []
    split: list[Member] = []
    failed: dict[Member, Result] = {}
    with collector_paused():
        for task, number in members:
            test, history, checkers, opts = tasks[task]
            try:
                parts = checkers[number].split(test, history, opts)
                packed = [(task, number, position, key,
                           pickle.dumps(part, pickle.HIGHEST_PROTOCOL))
                          for position, (key, part) in enumerate(parts)]
            except Exception as error:  # noqa: BLE001 - a crash is that checker's unknown verdict
                failed[(task, number)] = Result("unknown", error=describe_error(error))
                continue
            split.append((task, number))
            units.extend(packed)
    return units, split, failed


def _checked(session: Any, tasks: Sequence[KeyedTask], units: Sequence[Unit],
             split: Sequence[Member], started: float) -> dict[Member, Result]:
    """Run one kind of checker's units as a Spark job and merge each checker's answers."""
    answers: dict[Member, list[Answer]] = {member: [] for member in split}
    for answer in _run(session, tasks, units):
        answers[(answer[0], answer[1])].append(answer)
    results: dict[Member, Result] = {}
    for task, number in split:
        test, _, checkers, opts = tasks[task]
        mine = sorted(answers[(task, number)], key=lambda answer: answer[2])
        failed = [f"key {key!r}: {error}" for *_, key, ok, error in mine if not ok]
        if failed:
            results[(task, number)] = Result("unknown", error="; ".join(failed),
                                             seconds=time.monotonic() - started)
            continue
        checked = [(key, answer) for *_, key, _, answer in mine]
        results[(task, number)] = safely(
            lambda c=checkers[number], t=test, k=checked, o=opts: c.merge(
                t, k, o, time.monotonic() - started))
    return results


def _run(session: Any, tasks: Sequence[KeyedTask], units: Sequence[Unit]) -> list[Answer]:
    if not units:
        return []
    context = session.sparkContext
    slices = _deal(units, min(len(units), MAX_TASKS))
    plans = {task: (dict(tasks[task][0]), list(tasks[task][2]), dict(tasks[task][3]))
             for task in {unit[0] for unit in units}}
    return context.parallelize(slices, len(slices)).flatMap(
        lambda chunk: _check_units(chunk, plans)).collect()


def _deal(units: Sequence[Unit], count: int) -> list[list[Unit]]:
    """Deal units, largest first, into `count` slices of similar total size, the largest
    slices first (Spark starts the partitions in order)."""
    slices: list[list[Unit]] = [[] for _ in range(count)]
    sizes = [0] * count
    for unit in sorted(units, key=lambda u: len(u[4]), reverse=True):
        smallest = sizes.index(min(sizes))
        slices[smallest].append(unit)
        sizes[smallest] += len(unit[4])
    order = sorted(range(count), key=lambda i: sizes[i], reverse=True)
    return [slices[i] for i in order if slices[i]]


def _check_units(chunk: Sequence[Unit],
                 plans: Mapping[int, tuple[Mapping[str, Any], Sequence[KeyedChecker],
                                           Mapping[str, Any]]]) -> list[Answer]:
    """On an executor: check each unit; a crash is that key's error, not the job's."""
    answers: list[Answer] = []
    for task, number, position, key, packed in chunk:
        test, checkers, opts = plans[task]
        try:
            with collector_paused():
                part = pickle.loads(packed)
            answer = checkers[number].check_key(test, key, part, opts)
        except Exception as error:  # noqa: BLE001 - reported as the checker's unknown verdict
            answers.append((task, number, position, key, False, describe_error(error)))
        else:
            answers.append((task, number, position, key, True, answer))
    return answers
