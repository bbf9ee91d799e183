"""Time to detection: from the start of the fault episode that caused an anomaly to the
first op that reveals it (pure functions over a run's history and its witnesses).

- A fault episode is a fault in force that took effect. The nemesis records each action
  as its request then its result (two ops of one f in a row; a lone op is both): a
  lasting fault is in force from the request of its start (a targeted fault acts before
  it completes) to the result of its stop or of the final `heal`, an instant fault from
  its request to its result, or as many `seconds` after it as its result says its effect
  lasts (`stall-producer`: the stalled producer acts when they have passed). It took
  effect as `checker.history.fault_took_effect` says of its result (the rule the
  `faults` checker counts by).
- The op that reveals a witness: for a lost write below the highest offset read
  (`max-read-offset`), the first read of its key at a higher offset after the send; for
  a write overwritten (`overwritten-by`), the first read that saw another value at its
  offset after the last read that saw it there (the witness names the latest read, often
  a final one); for another
  loss (`unseen`, and the loss types of the acks and elections checkers: `lost-*`,
  `*-loss`), the history's last read (the final reads end without it); for any other
  witness, the latest of the ops it names (the op that completes a cycle, the read that
  saw an aborted write).
- The episode that caused it: for a loss attributed to an election (the witness names
  its `election`), the last episode that started at or before that election, and not
  after the reveal (a write a deposed leader acknowledged after its successor's
  election is attributed to the next election, which may come after the loss showed:
  a fenced broker's clients write to it until the cut heals); otherwise
  the episode that had acted (its result came) and had not ended by the witness's
  earliest op (the last one started), else the first that started after that op and
  before the reveal. Without one, the time counts from the test's start. The time runs
  from the episode's request, so a fault that waits while it acts is counted whole; a
  wait for a target before acting (the result's `waited` seconds) is not the fault's.
- A run's detection is that of the witness revealed first among the anomaly types that
  matter; checkers keep a few witnesses per type, so it is the first among those kept.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from checker.history import FAULT_STOPS, HEAL, NEMESIS, fault_took_effect

__all__ = ["Detection", "Episode", "HistoryScan", "first_detection", "scan_history"]

NS = 1e9
NS_PER_MS = 1_000_000
READS = frozenset({"poll", "txn"})
ENDS = frozenset({*FAULT_STOPS.values(), HEAL})


@dataclass(frozen=True)
class Episode:
    """A fault that took effect, in force from `start` (its request) to `end` (ns; None:
    never healed), having acted by `acted` (its result)."""

    fault: str
    start: int
    acted: int
    end: int | None


@dataclass
class HistoryScan:
    """What detection needs of a history: every op's time, every ok read's highest offset
    per key (time, index, offset, in history order), the values ok reads saw at each
    (key, offset) (time, index, value, in history order, a read kept only when the value
    differs from the one before), the last ok read (time, index), the fault episodes that
    took effect (by start), the client invocations and the last op's time."""

    times: dict[int, int]
    reads: dict[str, list[tuple[int, int, int]]]
    values: dict[tuple[str, int], list[tuple[int, int, Any]]]
    last_read: tuple[int, int] | None
    episodes: list[Episode]
    client_ops: int
    end_ns: int


def _polled(value: Any) -> dict[str, list[tuple[int, Any]]]:
    """Key -> the (offset, value) pairs a read's poll micro-ops returned."""
    found: dict[str, list[tuple[int, Any]]] = {}
    for micro in value if isinstance(value, list) else ():
        if not (isinstance(micro, list) and len(micro) >= 2 and micro[0] == "poll"
                and isinstance(micro[1], Mapping)):
            continue
        for key, pairs in micro[1].items():
            found.setdefault(str(key), []).extend(
                (pair[0], pair[1]) for pair in (pairs if isinstance(pairs, list) else ())
                if isinstance(pair, list) and len(pair) >= 2 and isinstance(pair[0], int))
    return found


def _record_read(scan: HistoryScan, time: int, index: int, value: Any) -> None:
    """An ok read into `scan`: its highest offset per key, the values it saw that changed."""
    for key, pairs in _polled(value).items():
        if not pairs:
            continue
        scan.reads.setdefault(key, []).append((time, index, max(p[0] for p in pairs)))
        for offset, seen in pairs:
            history = scan.values.setdefault((key, offset), [])
            if not history or history[-1][2] != seen:
                history.append((time, index, seen))


@dataclass(frozen=True)
class _Action:
    """A nemesis action: its f and fault name, its request's time, its result."""

    f: str
    fault: str
    requested: int
    done: int
    effective: bool
    lingers: int = 0  # ns an instant fault's effect lasts after its result


def _action(request: Mapping[str, Any], result: Mapping[str, Any]) -> _Action:
    """The action of a request and its result; a fault whose result says it `waited`
    seconds for a target before acting (`strand-follower`) is requested when it acted."""
    f = str(request.get("f"))
    value = result.get("value")
    requested = request["time"] + _seconds_ns(value, "waited")
    return _Action(f, str(request.get("fault") or result.get("fault") or f),
                   min(requested, result["time"]), result["time"], fault_took_effect(result),
                   _seconds_ns(value, "seconds"))


def _seconds_ns(value: Any, field: str) -> int:
    """A result's positive number of seconds under `field`, in ns (0 when it has none)."""
    seconds = value.get(field) if isinstance(value, Mapping) else None
    if isinstance(seconds, int | float) and not isinstance(seconds, bool) and seconds > 0:
        return int(seconds * NS)
    return 0


def _actions(ops: Iterable[Mapping[str, Any]]) -> list[_Action]:
    """The nemesis ops paired: an op with the f of the open request is its result, any
    other op opens the next request (an unanswered one is its own result)."""
    found: list[_Action] = []
    open_op: Mapping[str, Any] | None = None
    for op in [*ops, {}]:
        if open_op is not None and op.get("f") == open_op.get("f"):
            found.append(_action(open_op, op))
            open_op = None
            continue
        if open_op is not None and open_op.get("type") != "invoke":
            found.append(_action(open_op, open_op))
        open_op = op or None
    return found


def episodes(ops: Iterable[Mapping[str, Any]]) -> list[Episode]:
    """The fault episodes that took effect, by start, from the history's nemesis ops."""
    found: list[Episode] = []
    lasting: list[tuple[str, int]] = []  # (start f, index in found) of faults in force
    for action in _actions(ops):
        ends = [(f, at) for f, at in lasting if action.f == HEAL or FAULT_STOPS.get(f) == action.f]
        for item in ends:
            lasting.remove(item)
            found[item[1]] = replace(found[item[1]], end=action.done)
        if action.f in ENDS or not action.effective:
            continue
        found.append(Episode(action.fault, action.requested, action.done,
                             None if action.f in FAULT_STOPS
                             else action.done + action.lingers))
        if action.f in FAULT_STOPS:
            lasting.append((action.f, len(found) - 1))
    return sorted(found, key=lambda e: e.start)


def scan_history(path: Path) -> HistoryScan | None:
    """The scan of a history file (None when it cannot be read); torn lines are skipped,
    the checkers judge the history itself."""
    scan = HistoryScan({}, {}, {}, None, [], 0, 0)
    nemesis: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                try:
                    op = json.loads(line)
                except ValueError:
                    continue
                if not isinstance(op, dict):
                    continue
                time, index = op.get("time"), op.get("index")
                if isinstance(time, int) and isinstance(index, int):
                    scan.times[index] = time
                if op.get("process") == NEMESIS:
                    if isinstance(time, int):
                        nemesis.append(op)
                    continue
                if op.get("type") == "invoke":
                    scan.client_ops += 1
                elif op.get("type") == "ok" and op.get("f") in READS and \
                        isinstance(time, int) and isinstance(index, int):
                    scan.last_read = (time, index)
                    _record_read(scan, time, index, op.get("value"))
    except OSError:
        return None
    scan.episodes = episodes(nemesis)
    scan.end_ns = max(scan.times.values(), default=0)
    return scan


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
    elif "overwritten-by" in witness and isinstance(offset, int):
        seen = scan.values.get((str(key), offset), [])
        own = [at for at, (_, _, value) in enumerate(seen) if value == witness.get("value")]
        for time, index, value in seen[own[-1] + 1 if own else 0:]:
            if time >= first and value != witness.get("value"):
                return time, index
    elif "overwritten-by" not in witness and (kind == "unseen" or kind.startswith("lost-")
                                              or kind.endswith("-loss")):
        return scan.last_read or (scan.end_ns, max(scan.times))
    return max((scan.times[i], i) for i in ops)


def _cause(witness: Mapping[str, Any], first: int, reveal: int, scan: HistoryScan,
           start_wall_ms: float | None) -> Episode | None:
    election = witness.get("election")
    if isinstance(election, Mapping) and isinstance(election.get("time"), int | float) \
            and start_wall_ms is not None:
        at = min((election["time"] - start_wall_ms) * NS_PER_MS, reveal)
        before = [e for e in scan.episodes if e.start <= at]
        return before[-1] if before else None
    in_force = [e for e in scan.episodes if e.acted <= first
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
