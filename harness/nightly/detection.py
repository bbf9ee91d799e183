"""Time to detection: from the start of the fault episode that caused an anomaly to the
first op that reveals it (pure functions over a run's history and its witnesses).

- A fault episode is a fault in force (`checker.history.nemesis_periods`: a lasting
  fault from its start to its stop, an instant fault from its request to its result)
  that took effect: its value names what it acted on, not "no-target", "not-started",
  `{"skipped": ...}` or nothing.
- The op that reveals a witness: for a lost write below the highest offset read
  (`max-read-offset`), the first read of its key at a higher offset after the send;
  for an unseen write, the last read of its key (the final read that still lacks it),
  else the history's end; for any other witness, the latest of the ops it names (the
  read that saw another value, the op that completes a cycle).
- The episode that caused it: for a loss attributed to an election (the witness names
  its `election`), the last episode that started at or before that election; otherwise
  the episode in force at the witness's earliest op (the last one started by then),
  else the first that started after it and before the reveal. Without one, the time
  counts from the test's start.
- A run's detection is that of the witness revealed first among the anomaly types that
  matter; checkers keep a few witnesses per type, so it is the first among those kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.history import NEMESIS, Op, nemesis_periods
from checker.history.errors import HistoryError
from checker.history.ops import op_from_json

__all__ = ["Detection", "Episode", "HistoryScan", "first_detection", "scan_history",
           "took_effect"]

NS = 1e9
NS_PER_MS = 1_000_000
NO_EFFECT = frozenset({"no-target", "not-started"})
READS = frozenset({"poll", "txn"})


def took_effect(value: Any) -> bool:
    """Whether a nemesis op's value says it acted on something."""
    if isinstance(value, str):
        return value not in NO_EFFECT and bool(value)
    if isinstance(value, Mapping) and "skipped" in value:
        return False
    return bool(value)


@dataclass(frozen=True)
class Episode:
    """A fault that took effect, in force from `start` to `end` (ns; None: never healed)."""

    fault: str
    start: int
    end: int | None


@dataclass
class HistoryScan:
    """What detection needs of a history: every op's time, every ok read's highest offset
    per key (time, index, offset, in history order), the fault episodes that took effect
    (by start), the client invocations and the last op's time."""

    times: dict[int, int]
    reads: dict[str, list[tuple[int, int, int]]]
    episodes: list[Episode]
    client_ops: int
    end_ns: int


def _highest_offsets(value: Any) -> dict[str, int]:
    """Key -> the highest offset a read's poll micro-ops returned."""
    found: dict[str, int] = {}
    for micro in value if isinstance(value, list) else ():
        if not (isinstance(micro, list) and len(micro) >= 2 and micro[0] == "poll"
                and isinstance(micro[1], Mapping)):
            continue
        for key, pairs in micro[1].items():
            offsets = [pair[0] for pair in pairs if isinstance(pair, list) and pair
                       and isinstance(pair[0], int)] if isinstance(pairs, list) else []
            if offsets:
                found[str(key)] = max(found.get(str(key), -1), max(offsets))
    return found


def scan_history(path: Path) -> HistoryScan | None:
    """The scan of a history file (None when it cannot be read); torn lines are skipped,
    the checkers judge the history itself."""
    times: dict[int, int] = {}
    reads: dict[str, list[tuple[int, int, int]]] = {}
    nemesis: list[Op] = []
    invokes = 0
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                try:
                    op = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(op, dict):
                    continue
                time, index = op.get("time"), op.get("index")
                if isinstance(time, int) and isinstance(index, int):
                    times[index] = time
                if op.get("process") == NEMESIS:
                    try:
                        nemesis.append(op_from_json(op, str(path), number))
                    except HistoryError:
                        pass
                    continue
                if op.get("type") == "invoke":
                    invokes += 1
                elif op.get("type") == "ok" and op.get("f") in READS and \
                        isinstance(time, int) and isinstance(index, int):
                    for key, offset in _highest_offsets(op.get("value")).items():
                        reads.setdefault(key, []).append((time, index, offset))
    except OSError:
        return None
    episodes = [Episode(p.name, p.start, p.end) for p in nemesis_periods(nemesis)
                if took_effect(p.value)]
    return HistoryScan(times, reads, episodes, invokes, max(times.values(), default=0))


@dataclass(frozen=True)
class Detection:
    """When a run detected an anomaly: the witness's `type`, the op that revealed it and
    its time, and the fault episode that caused it (None: none, counted from 0 s)."""

    type: str
    reveal_op: int
    reveal_s: float
    fault: str | None
    fault_start_s: float

    @property
    def seconds(self) -> float:
        return round(self.reveal_s - self.fault_start_s, 3)

    def to_json(self) -> dict[str, Any]:
        return {"type": self.type, "reveal_op": self.reveal_op, "reveal_s": self.reveal_s,
                "fault": self.fault, "fault_start_s": self.fault_start_s,
                "seconds": self.seconds}


def _reveal(kind: str, witness: Mapping[str, Any], ops: list[int],
            scan: HistoryScan) -> tuple[int, int]:
    """(time, index) of the op that reveals a witness whose ops are `ops` (with times)."""
    first = min(scan.times[i] for i in ops)
    key, offset = witness.get("key"), witness.get("offset")
    reads = scan.reads.get(str(key), []) if key is not None else []
    if "max-read-offset" in witness and isinstance(offset, int):
        for time, index, highest in reads:
            if time >= first and highest > offset:
                return time, index
    if kind == "unseen":
        return (reads[-1][0], reads[-1][1]) if reads else (scan.end_ns, max(scan.times))
    return max((scan.times[i], i) for i in ops)


def _cause(witness: Mapping[str, Any], first: int, reveal: int, scan: HistoryScan,
           start_wall_ms: float | None) -> Episode | None:
    election = witness.get("election")
    if isinstance(election, Mapping) and isinstance(election.get("time"), int | float) \
            and start_wall_ms is not None:
        at = (election["time"] - start_wall_ms) * NS_PER_MS
        before = [e for e in scan.episodes if e.start <= at]
        return before[-1] if before else None
    in_force = [e for e in scan.episodes if e.start <= first
                and (e.end is None or e.end >= first)]
    if in_force:
        return in_force[-1]
    after = [e for e in scan.episodes if first < e.start <= reveal]
    return after[0] if after else None


def first_detection(witnesses: Iterable[tuple[str, Mapping[str, Any]]], scan: HistoryScan,
                    start_wall_ms: float | None) -> Detection | None:
    """The detection of the witness (anomaly type, witness) revealed first; None when no
    witness names an op of the history."""
    best: tuple[int, int, Detection] | None = None
    for kind, witness in witnesses:
        ops = [i for i in witness.get("ops") or () if isinstance(i, int) and i in scan.times]
        if not ops:
            continue
        reveal, index = _reveal(kind, witness, ops, scan)
        cause = _cause(witness, min(scan.times[i] for i in ops), reveal, scan, start_wall_ms)
        # an attributed witness (it names its election) wins a tie: it names its cause
        rank = 0 if isinstance(witness.get("election"), Mapping) else 1
        if best is None or (reveal, rank) < best[:2]:
            best = (reveal, rank, Detection(
                kind, index, round(reveal / NS, 3), cause.fault if cause else None,
                round(cause.start / NS, 3) if cause else 0.0))
    return best[2] if best else None
