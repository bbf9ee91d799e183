"""Any `KeyedChecker` (checker.core) on Spark: the keys of every such checker of every
history in one job.

The driver splits each history, given as its ops (parsed and validated once), with each
checker; each (history, checker, key) part is one unit. Units are dealt, largest first,
into Spark partitions, one unit each up to `MAX_TASKS`, so that slow keys spread over the
executors as they free up; each executor runs the checker's pure `check_key`, and the
driver merges each checker's answers in key order. A split, a key or a merge that crashes
makes that checker's result "unknown" with the error, as `check_safe` does in the calling
process. This module works on the SparkContext it is given and imports no pyspark.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from checker.core import KeyedChecker, Result, describe_error, safely
from checker.history import Op

__all__ = ["MAX_TASKS", "KeyedTask", "check_keyed_on_spark"]

MAX_TASKS = 256

# (test, the history's ops, its keyed checkers, opts)
KeyedTask = tuple[Mapping[str, Any], Sequence[Op], Sequence[KeyedChecker],
                  Mapping[str, Any]]
# (task number, checker number, key position, key, part)
Unit = tuple[int, int, int, Hashable, Any]
# (task number, checker number, key position, key, checked, answer or error)
Answer = tuple[int, int, int, Hashable, bool, Any]


def check_keyed_on_spark(session: Any, tasks: Sequence[KeyedTask]) -> list[list[Result]]:
    """For each task, each of its checkers' Result, as its `check` gives in the calling
    process, with the keys of all of them checked on the executors in one Spark job."""
    started = time.monotonic()
    results: dict[tuple[int, int], Result] = {}
    units: list[Unit] = []
    split: list[tuple[int, int]] = []
    for task, (test, history, checkers, opts) in enumerate(tasks):
        for number, checker in enumerate(checkers):
            try:
                parts = checker.split(test, history, opts)
            except Exception as error:  # noqa: BLE001 - a crash is that checker's unknown verdict
                results[(task, number)] = Result("unknown", error=describe_error(error))
                continue
            split.append((task, number))
            units.extend((task, number, position, key, part)
                         for position, (key, part) in enumerate(parts))
    answers: dict[tuple[int, int], list[Answer]] = {pair: [] for pair in split}
    for answer in _run(session, tasks, units):
        answers[(answer[0], answer[1])].append(answer)
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
    return [[results[(task, number)] for number in range(len(checkers))]
            for task, (_, _, checkers, _) in enumerate(tasks)]


def _run(session: Any, tasks: Sequence[KeyedTask], units: Sequence[Unit]) -> list[Answer]:
    if not units:
        return []
    context = session.sparkContext
    slices = _deal(units, min(len(units), MAX_TASKS))
    plans = [(dict(test), list(checkers), dict(opts)) for test, _, checkers, opts in tasks]
    return context.parallelize(slices, len(slices)).flatMap(
        lambda chunk: _check_units(chunk, plans)).collect()


def _deal(units: Sequence[Unit], count: int) -> list[list[Unit]]:
    """Deal units, largest first, into `count` slices of similar total size, the largest
    slices first (Spark starts the partitions in order)."""
    slices: list[list[Unit]] = [[] for _ in range(count)]
    sizes = [0] * count
    for unit in sorted(units, key=lambda u: _size(u[4]), reverse=True):
        smallest = sizes.index(min(sizes))
        slices[smallest].append(unit)
        sizes[smallest] += _size(unit[4])
    order = sorted(range(count), key=lambda i: sizes[i], reverse=True)
    return [slices[i] for i in order if slices[i]]


def _size(part: Any) -> int:
    return len(part) if hasattr(part, "__len__") else 1


def _check_units(chunk: Sequence[Unit], plans: Sequence[tuple[Mapping[str, Any],
                                                              Sequence[KeyedChecker],
                                                              Mapping[str, Any]]]
                 ) -> list[Answer]:
    """On an executor: check each unit; a crash is that key's error, not the job's."""
    answers: list[Answer] = []
    for task, number, position, key, part in chunk:
        test, checkers, opts = plans[task]
        try:
            answer = checkers[number].check_key(test, key, part, opts)
        except Exception as error:  # noqa: BLE001 - reported as the checker's unknown verdict
            answers.append((task, number, position, key, False, describe_error(error)))
        else:
            answers.append((task, number, position, key, True, answer))
    return answers
