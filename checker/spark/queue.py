"""Queue histories on Spark: their analyses, each history whole in one task or split by key.

`queue_analyses_on_spark` chooses per history with `checked_whole`:

- whole: one task receives the history's bytes, parses and validates them line
  by line and runs `checker.queue.analysis.analyse` on them, exactly as the calling
  process would; tasks go largest first, so the executors stay evenly loaded,
  and nothing is shuffled;
- split by key, for a history too large for one executor's share: executors
  parse byte ranges of it into per-key events, the events of each key (tagged
  with its history's number) meet in one task that runs
  `checker.queue.finders.analyse_key`, and the driver folds the key reports.
  Executors also validate the history rules within their range
  (`checker.history.SliceValidator`) and the driver joins the ranges in order.

Either way a malformed history gives the `HistoryError` (line and reason) that
`checker.queue.events.read_queue_ops` gives.

Executors never open a driver's path: the driver reads a history given as a
path and ships its bytes through Spark (compressed; cut at line ends, each
range with the number of its first line, when split). A history given as a URL
(`file://`, `hdfs://`, `s3a://`, see `is_shared`) is on storage the executors
reach: they read it with Spark's own reader and the driver does not ship it.
This module works on the SparkContext it is given and imports no pyspark.
"""

from __future__ import annotations

import functools
import io
import os
import re
import time
import zlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from checker.history import (
    HistoryValidator,
    Op,
    SliceState,
    SliceValidator,
    numbered_ops,
    op_from_line,
)
from checker.history.errors import HistoryError
from checker.queue.analysis import QueueAnalysis, analyse, fold
from checker.queue.events import RESET, events_of, proven_by, txn_candidates
from checker.queue.finders import KeyReport, QueueBudget, analyse_key

RANGE_BYTES = 16 * 1024 * 1024
WHOLE_SHARE = 1.5
META = "\x00meta"
CANDIDATES = "\x00candidates"
URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
HistorySource = str | os.PathLike[str]
ByteRange = tuple[int, str, int, bytes]
Resets = dict[Any, list[tuple[int, tuple | None]]]  # process -> (index, kept keys)


def is_shared(source: HistorySource) -> bool:
    """A history given as a URL (`file://`, `hdfs://`, `s3a://`) is on storage every executor
    reaches: the executors read it with Spark's reader instead of receiving it from the
    driver. Any other source is a path only the driver is assumed to see."""
    return isinstance(source, str) and URL.match(source) is not None


def queue_analyses_on_spark(session: Any, sources: Sequence[HistorySource],
                            budgets: Sequence[QueueBudget],
                            timings: dict[str, float] | None = None
                            ) -> list[QueueAnalysis | HistoryError]:
    """The queue analyses of histories, or the HistoryError of a malformed one: first those
    checked whole, then those split by key (see `checked_whole`); `timings` receives the
    seconds of each (`whole`, and `load` of those split)."""
    timings = timings if timings is not None else {}
    started = time.monotonic()
    context = session.sparkContext
    sizes = [_size(context, source) for source in sources]
    whole = checked_whole(sizes, context.defaultParallelism)
    picked = [number for number, is_whole in enumerate(whole) if is_whole]
    analyses = dict(zip(picked, _whole_analyses(
        context, [sources[n] for n in picked], [sizes[n] for n in picked],
        [budgets[n] for n in picked]), strict=True))
    timings["whole"] = time.monotonic() - started
    picked = [number for number, is_whole in enumerate(whole) if not is_whole]
    analyses.update(zip(picked, _split_analyses(
        context, [sources[n] for n in picked], [budgets[n] for n in picked], timings),
        strict=True))
    return [analyses[number] for number in range(len(sources))]


def checked_whole(sizes: Sequence[int], parallelism: int) -> list[bool]:
    """Per history (by its size in bytes), whether one task checks it whole: when it is at
    most half again one core's even share of all of them (1.5 * total / parallelism), so
    histories of about equal size go whole, one per task, and keep every core busy. A
    larger one, such as a single history on several cores, is split by key over all the
    cores instead."""
    limit = WHOLE_SHARE * sum(sizes) / max(1, parallelism)
    return [size <= limit for size in sizes]


def _size(context: Any, source: HistorySource) -> int:
    """A history's bytes: a path's on the driver, a URL's from its Hadoop file system."""
    if not is_shared(source):
        return os.path.getsize(source)
    path = context._jvm.org.apache.hadoop.fs.Path(source)
    system = path.getFileSystem(context._jsc.hadoopConfiguration())
    return system.getContentSummary(path).getLength()


def _whole_analyses(context: Any, sources: Sequence[HistorySource], sizes: Sequence[int],
                    budgets: Sequence[QueueBudget]) -> list[QueueAnalysis | HistoryError]:
    """Each history analysed by one task, the largest first: executors take a stage's tasks
    in order, so each takes the next history as it finishes one. A path's bytes go from
    the driver, compressed; a URL's task reads it (`SparkContext.binaryFiles`). The time
    budget of a history starts with its task, as in the calling process."""
    if not sources:
        return []
    tasks = []
    for number in sorted(range(len(sources)), key=lambda n: -sizes[n]):
        name = os.fspath(sources[number])
        if is_shared(name):
            data = context.binaryFiles(name).values()
        else:
            data = context.parallelize([zlib.compress(Path(name).read_bytes(), 1)],
                                       1).map(zlib.decompress)
        tasks.append(data.map(functools.partial(_analyse_whole, number, name,
                                                budgets[number])))
    analyses = dict(context.union(tasks).collect())
    return [analyses[number] for number in range(len(sources))]


def _analyse_whole(number: int, name: str, budget: QueueBudget,
                   data: bytes) -> tuple[int, QueueAnalysis | HistoryError]:
    """(number, the analysis of a history's bytes or its HistoryError) as the calling
    process gives them: `read_queue_ops` checks line by line, then `analyse`
    (which reads the ops as they are validated, so the first bad line is the one named)."""
    line = 0

    def ops() -> Iterator[Op]:
        nonlocal line
        for line_number, op in numbered_ops(data.split(b"\n"), name):
            line = line_number
            yield op

    try:
        return number, analyse(ops(), name, budget)
    except HistoryError as error:
        # analyse names a bad micro-op by its op's index + 1, at most the line read last
        return number, HistoryError(name, max(error.line, line), error.reason)


def _split_analyses(context: Any, sources: Sequence[HistorySource],
                    budgets: Sequence[QueueBudget], timings: dict[str, float]
                    ) -> list[QueueAnalysis | HistoryError]:
    """The queue analyses of histories, parsed and checked key by key on executors, or the
    HistoryError of a malformed one; a key over its history's budget of events is not
    gathered at all (its report is unknown)."""
    deadlines = [budget.deadline() for budget in budgets]
    started = time.monotonic()
    names = [os.fspath(source) for source in sources]
    parallelism = 2 * context.defaultParallelism
    ranges = _range_rdd(context, sources, parallelism)
    if ranges is None:
        timings["load"] = time.monotonic() - started
        return [fold([]) for _ in sources]
    parsed = ranges.mapPartitions(_parse_ranges).persist()
    try:
        meta = parsed.filter(lambda item: item[0][1] in (META, RESET, CANDIDATES)).collect()
        candidates = _txn_candidates(meta)
        merged = _merge_histories(names, [item for item in meta if item[0][1] != CANDIDATES])
        timings["load"] = time.monotonic() - started
        reports: list[list[KeyReport]] = [[] for _ in sources]
        kept: dict[tuple[int, Any], int] = {}
        for number, outcome in enumerate(merged):
            if isinstance(outcome, HistoryError):
                continue
            for key, size in outcome[1].items():
                reason = budgets[number].too_many(key, size)
                if reason:
                    reports[number].append(KeyReport(key, unknown=reason))
                else:
                    kept[(number, key)] = size
        if kept:
            slots = _deal_keys(kept, parallelism)
            proven = _proven_sends(context, parsed, slots, candidates)
            plans = context.broadcast({
                number: (outcome[0], budgets[number], deadlines[number],
                         frozenset(proven.get(number, ())))
                for number, outcome in enumerate(merged)
                if not isinstance(outcome, HistoryError)})
            for number, report in (
                parsed.filter(lambda item: item[0] in slots)
                .groupByKey(max(slots.values()) + 1, lambda key: slots[key])
                .map(lambda item: _analyse_tagged(item, plans.value))
                .collect()
            ):
                reports[number].append(report)
            plans.unpersist()
    finally:
        parsed.unpersist()
    analyses: list[QueueAnalysis | HistoryError] = []
    for number, outcome in enumerate(merged):
        if isinstance(outcome, HistoryError):
            analyses.append(outcome)
            continue
        analysis = fold(reports[number])
        analysis.seconds = time.monotonic() - started
        analyses.append(analysis)
    return analyses


def _txn_candidates(meta: list[tuple[tuple[int, str], Any]]
                    ) -> dict[tuple[int, Any], dict[Any, list[int]]]:
    """(history number, key) -> value -> indices of the transactional sends of unknown
    outcome that the ranges found (`checker.queue.events.txn_candidates`)."""
    candidates: dict[tuple[int, Any], dict[Any, list[int]]] = {}
    for (number, kind), body in meta:
        if kind == CANDIDATES:
            for key, value, index in body:
                candidates.setdefault((number, key), {}).setdefault(value, []).append(index)
    return candidates


def _proven_sends(context: Any, parsed: Any, slots: Mapping[tuple[int, Any], int],
                  candidates: dict[tuple[int, Any], dict[Any, list[int]]]
                  ) -> dict[int, set[int]]:
    """History number -> the info transactions some key of it proves committed
    (`checker.queue.events.proven_sends`), without gathering keys: the candidates go to every
    range, which names those its ok polls read. No pass at all without candidates."""
    candidates = {tagged: values for tagged, values in candidates.items() if tagged in slots}
    if not candidates:
        return {}
    shared = context.broadcast(candidates)
    proven: dict[int, set[int]] = {}
    for number, index in parsed.filter(lambda item: item[0] in shared.value).flatMap(
            lambda item: [(item[0][0], i) for i in proven_by(item[1],
                                                             shared.value[item[0]])]).collect():
        proven.setdefault(number, set()).add(index)
    shared.unpersist()
    return proven


def _analyse_tagged(item: tuple[tuple[int, Any], Iterable[list]],
                    plans: Mapping[int, tuple[Resets, QueueBudget, float, frozenset[int]]]
                    ) -> tuple[int, KeyReport]:
    """One key's report, knowing its history's resets and the info transactions that any
    key of that history proves committed."""
    (number, key), parts = item
    resets, budget, deadline, proven = plans[number]
    return number, analyse_key(key, [e for part in parts for e in part], resets, budget,
                               deadline, proven)


def _merge_histories(names: Sequence[str], meta: list[tuple[tuple[int, str], Any]]
                     ) -> list[tuple[Resets, dict[Any, int]] | HistoryError]:
    """Each history's (resets, sizes) from the records tagged with its number, or its
    HistoryError."""
    by_history: list[list[tuple[str, Any]]] = [[] for _ in names]
    for (number, kind), body in meta:
        by_history[number].append((kind, body))
    merged: list[tuple[Resets, dict[Any, int]] | HistoryError] = []
    for name, items in zip(names, by_history, strict=True):
        try:
            merged.append(_merge_meta(name, items))
        except HistoryError as error:
            merged.append(error)
    return merged


# --- how a history's bytes reach the executors ----------------------------------------------


def _range_rdd(context: Any, sources: Sequence[HistorySource], at_least: int) -> Any:
    """An RDD of byte ranges (history number, name, first line, bytes) cut at line ends,
    in at least `at_least` partitions, or None when no history has a byte.

    The driver reads a path and parallelizes its ranges (compressed in transit); a shared
    URL is read whole by one executor task (`SparkContext.binaryFiles`), which cuts it into
    ranges that are then spread over the executors. No executor opens a driver path.
    """
    local = [number for number, source in enumerate(sources) if not is_shared(source)]
    rdds = []
    if local:
        total = sum(os.path.getsize(sources[number]) for number in local)
        size = _range_size(total, at_least)
        packed = []
        for number in local:
            name = os.fspath(sources[number])
            with open(name, "rb") as source:
                packed += [(number, name, first, zlib.compress(data, 1))
                           for first, data in _cut_at_lines(source, size)]
        if packed:
            rdds.append(context.parallelize(packed, min(len(packed), at_least)).map(_unpack))
    shared = [number for number, source in enumerate(sources) if is_shared(source)]
    if shared:
        files = [context.binaryFiles(sources[number]).flatMap(
                     functools.partial(_cut_file, number, sources[number], at_least, RANGE_BYTES))
                 for number in shared]
        rdds.append(context.union(files).repartition(at_least))
    if not rdds:
        return None
    return rdds[0] if len(rdds) == 1 else context.union(rdds)


def _range_size(total: int, at_least: int) -> int:
    """Bytes per range: `total` bytes in at least `at_least` ranges, at most RANGE_BYTES."""
    return max(1, min(RANGE_BYTES, -(-total // max(1, at_least))))


def _cut_at_lines(source: BinaryIO, size: int) -> Iterator[tuple[int, bytes]]:
    """Consecutive pieces of about `size` bytes, each ending at a line end (or the end of
    the source), with the line number of each piece's first line."""
    line = 1
    while data := source.read(size):
        if not data.endswith(b"\n"):
            data += source.readline()
        yield line, data
        line += data.count(b"\n")


def _unpack(packed: ByteRange) -> ByteRange:
    number, name, first, data = packed
    return number, name, first, zlib.decompress(data)


def _cut_file(number: int, name: str, at_least: int, largest: int,
              item: tuple[str, bytes]) -> list[ByteRange]:
    """The byte ranges of a shared history read whole on an executor."""
    data = item[1]
    size = max(1, min(largest, -(-len(data) // at_least)))
    return [(number, name, first, piece) for first, piece in _cut_at_lines(io.BytesIO(data), size)]


def _parse_ranges(ranges: Iterator[ByteRange]) -> Iterator[tuple[Any, Any]]:
    """Per-key events of some byte ranges, keyed (history number, key); then, for each
    history, (number, RESET) with its resets and (number, META) with each range's first
    line and SliceState, and the number of events per key."""
    keyed: dict[int, dict[Any, list]] = {}
    reset_lists: dict[int, list] = {}
    slice_lists: dict[int, list[tuple[int, SliceState]]] = {}
    for history, path, first_line, data in ranges:
        lines = data.split(b"\n")
        by_key = keyed.setdefault(history, {})
        resets = reset_lists.setdefault(history, [])
        slices = slice_lists.setdefault(history, [])
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
    for history, by_key in keyed.items():
        sizes = {key: len(events) for key, events in by_key.items()}
        yield from (((history, key), events) for key, events in by_key.items())
        yield (history, RESET), reset_lists[history]
        yield (history, CANDIDATES), [(key, value, index) for key, events in by_key.items()
                                      for value, index in txn_candidates(events)]
        yield (history, META), {"slices": slice_lists[history], "sizes": sizes}


def _merge_meta(path: str, meta: list[tuple[Any, Any]]) -> tuple[Resets, dict[Any, int]]:
    """Join the ranges' validation in file order (raising the history's first violation),
    then gather resets (index, kept keys) by process and event counts by key."""
    resets: Resets = {}
    sizes: dict[Any, int] = {}
    slices: list[tuple[int, SliceState]] = []
    for kind, body in meta:
        if kind == RESET:
            for index, process, kept in body:
                resets.setdefault(process, []).append((index, kept))
        else:
            slices.extend(body["slices"])
            for key, size in body["sizes"].items():
                sizes[key] = sizes.get(key, 0) + size
    validator = HistoryValidator(path)
    for _, part in sorted(slices, key=lambda item: item[0]):
        validator.join(part)
    for items in resets.values():
        items.sort(key=lambda item: item[0])
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
    "HistorySource",
    "checked_whole",
    "is_shared",
    "queue_analyses_on_spark",
]
