"""Any `KeyedChecker` (checker.core) on Spark: the keys of every such checker in one job.

Each checker splits the history's validated JSONL lines (bytes, not parsed ops, so
that a checker whose split only routes lines to keys leaves the parsing to the
executors); each (checker, key) part is one unit. Units are dealt, largest first, into Spark
partitions, one unit each up to `MAX_TASKS`, so that slow keys spread over the executors
as they free up; each executor runs the checker's pure `check_key`, and the driver merges
each checker's answers in key order. A split, a key or a merge that crashes makes that
checker's result "unknown" with the error, as `check_safe` does in the calling process.
This module works on the SparkContext it is given and imports no pyspark.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

from checker.core import KeyedChecker, Result, describe_error, safely
from checker.history import Op

__all__ = ["MAX_TASKS", "check_keyed_on_spark"]

MAX_TASKS = 256

# (checker number, key position, key, part)
Unit = tuple[int, int, Hashable, Any]
# (checker number, key position, key, checked, answer or error)
Answer = tuple[int, int, Hashable, bool, Any]


def check_keyed_on_spark(session: Any, test: Mapping[str, Any],
                         history: Sequence[Op | bytes],
                         checkers: Sequence[KeyedChecker],
                         opts: Mapping[str, Any]) -> list[Result]:
    """Each checker's Result, as its `check` gives in the calling process, with its keys
    checked on the executors, all checkers' keys in one Spark job. `history`: the ops, or
    the validated JSONL lines, of the history."""
    started = time.monotonic()
    results: dict[int, Result] = {}
    units: list[Unit] = []
    split: list[int] = []
    for number, checker in enumerate(checkers):
        try:
            parts = checker.split(test, history, opts)
        except Exception as error:  # noqa: BLE001 - a crash is that checker's unknown verdict
            results[number] = Result("unknown", error=describe_error(error))
            continue
        split.append(number)
        units.extend((number, position, key, part)
                     for position, (key, part) in enumerate(parts))
    answers: dict[int, list[Answer]] = {number: [] for number in split}
    for answer in _run(session, test, checkers, units, opts):
        answers[answer[0]].append(answer)
    for number in split:
        mine = sorted(answers[number], key=lambda answer: answer[1])
        failed = [f"key {key!r}: {error}" for _, _, key, ok, error in mine if not ok]
        if failed:
            results[number] = Result("unknown", error="; ".join(failed),
                                     seconds=time.monotonic() - started)
            continue
        checker = checkers[number]
        checked = [(key, answer) for _, _, key, _, answer in mine]
        results[number] = safely(lambda c=checker, k=checked: c.merge(
            test, k, opts, time.monotonic() - started))
    return [results[number] for number in range(len(checkers))]


def _run(session: Any, test: Mapping[str, Any], checkers: Sequence[KeyedChecker],
         units: Sequence[Unit], opts: Mapping[str, Any]) -> list[Answer]:
    if not units:
        return []
    context = session.sparkContext
    slices = _deal(units, min(len(units), MAX_TASKS))
    test, checkers, opts = dict(test), list(checkers), dict(opts)
    return context.parallelize(slices, len(slices)).flatMap(
        lambda chunk: _check_units(chunk, test, checkers, opts)).collect()


def _deal(units: Sequence[Unit], count: int) -> list[list[Unit]]:
    """Deal units, largest first, into `count` slices of similar total size, the largest
    slices first (Spark starts the partitions in order)."""
    slices: list[list[Unit]] = [[] for _ in range(count)]
    sizes = [0] * count
    for unit in sorted(units, key=lambda u: _size(u[3]), reverse=True):
        smallest = sizes.index(min(sizes))
        slices[smallest].append(unit)
        sizes[smallest] += _size(unit[3])
    order = sorted(range(count), key=lambda i: sizes[i], reverse=True)
    return [slices[i] for i in order if slices[i]]


def _size(part: Any) -> int:
    return len(part) if hasattr(part, "__len__") else 1


def _check_units(chunk: Sequence[Unit], test: Mapping[str, Any],
                 checkers: Sequence[KeyedChecker], opts: Mapping[str, Any]) -> list[Answer]:
    """On an executor: check each unit; a crash is that key's error, not the job's."""
    answers: list[Answer] = []
    for number, position, key, part in chunk:
        try:
            answer = checkers[number].check_key(test, key, part, opts)
        except Exception as error:  # noqa: BLE001 - reported as the checker's unknown verdict
            answers.append((number, position, key, False, describe_error(error)))
        else:
            answers.append((number, position, key, True, answer))
    return answers
