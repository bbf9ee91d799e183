"""Recorded fault schedules: what `kchaos replay` invokes again and `kchaos shrink` cuts down.

A schedule is the nemesis ops a run invoked while its workload ran (not the final heal),
each at the time it was invoked, with the value it was invoked with: the role ("leader",
"controller", "one", a partition shape), not the nodes that role resolved to, so a replay
picks its targets again in its own cluster.

    recorded_schedule(history_ops, final_fs, time_limit)  # the schedule in a history
    episodes(ops)       # a fault's start with its stop, or a one-shot op alone
    ops_of(episodes)    # the episodes' ops again, in time order
    halve_holds(...), cut_time_limit(...)                  # shortening, for shrink
    ScheduleFile, read_schedule, write_schedule            # the replayable file

The file (JSON, `"format": "kchaos-schedule"`, `"version": 1`):

    {"format": "kchaos-schedule", "version": 1,
     "source": {"run": "store/queue/20261125T234950", "anomalies": ["lost-write", ...],
                "failing": []},
     "seed": 1, "time_limit": 30.0,
     "config": {"run": {...}, "backend": {...}, "db": {...}, "workload": {...},
                "nemesis": {...}},
     "ops": [{"seconds": 3.0012, "f": "start-partition", "value": "leader-from-followers",
              "fault": "leader-from-followers"}, ...]}

`config` is test.json's "config" (every option by section); `seed` and `time_limit` win
over the ones in it. An op may be up to `PAST_LIMIT` seconds past the time limit: a run
records an op its schedule had at the very end a few milliseconds after it, and a replay
invokes it just before the limit. `source.anomalies` are the anomaly types the schedule
is expected to show, allowed by the configuration or not, and `source.failing` those it
does not allow (null: unknown). `ops` are in time order, `seconds` since the test
started; `fault` (optional) names the fault as the user asked for it, which the replay's
ops carry on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from nemesis.package import FAULTS

__all__ = [
    "FORMAT",
    "NEMESIS",
    "VERSION",
    "Episode",
    "ScheduleError",
    "ScheduleFile",
    "TimedOp",
    "cut_time_limit",
    "episodes",
    "halve_holds",
    "invocations",
    "ops_of",
    "read_schedule",
    "recorded_schedule",
    "write_schedule",
]

FORMAT = "kchaos-schedule"
VERSION = 1
NEMESIS = "nemesis"
NS_PER_SECOND = 1_000_000_000
PAST_LIMIT = 1.0  # seconds an op may be recorded after the time limit (see above)
# The op that ends each fault started by an op f (kill is ended by start, pause by resume).
STOPS: dict[str, str] = {fault.start: fault.stop for fault in FAULTS.values() if fault.stop}


class ScheduleError(ValueError):
    """A schedule that cannot be replayed: the message says where, what, and what to do."""


@dataclass(frozen=True)
class TimedOp:
    """A nemesis op to invoke `seconds` after the test started; `fault` names the fault as
    the user asked for it (None in schedules written before it was recorded)."""

    seconds: float
    f: str
    value: Any = None
    fault: str | None = None

    def to_op(self, time_limit: float) -> dict[str, Any]:
        """The nemesis op for `nemesis.package.Schedule`; kept inside the time limit, past
        which the workload's generator drops ops."""
        time = min(round(self.seconds * NS_PER_SECOND), int(time_limit * NS_PER_SECOND) - 1)
        op = {"type": "info", "process": NEMESIS, "f": self.f, "value": self.value,
              "time": max(time, 0)}
        return op if self.fault is None else {**op, "fault": self.fault}

    def describe(self) -> str:
        value = "" if self.value is None else f" {json.dumps(self.value, sort_keys=True)}"
        return f"{self.f}{value} at {self.seconds:.1f} s"


@dataclass(frozen=True)
class Episode:
    """A fault: the op that starts it and the op that ends it, or a one-shot op alone."""

    start: TimedOp
    stop: TimedOp | None = None

    @property
    def hold(self) -> float | None:
        """Seconds from start to stop (None for a one-shot op)."""
        return None if self.stop is None else self.stop.seconds - self.start.seconds

    @property
    def end(self) -> float:
        return (self.stop or self.start).seconds

    def describe(self) -> str:
        if self.stop is None:
            return self.start.describe()
        return f"{self.start.describe()} for {self.hold:.1f} s"


def invocations(history_ops: Iterable[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    """The nemesis invocations of a history, in order. The nemesis records each op twice,
    both `info`: when it invokes it (the value asked for, e.g. "leader") and when it is done
    (what it did, e.g. {"n2": "killed"}), so an op with the f of the open invocation
    completes it and any other opens the next."""
    found: list[Mapping[str, Any]] = []
    open_f: str | None = None
    for op in history_ops:
        if op.get("process") != NEMESIS:
            continue
        if op.get("f") == open_f:
            open_f = None
        else:
            found.append(op)
            open_f = op.get("f")
    return found


def recorded_schedule(history_ops: Iterable[Mapping[str, Any]], final_fs: Sequence[str],
                      time_limit: float) -> list[TimedOp]:
    """The ops the schedule invoked during the workload: every nemesis invocation but the
    final phase's (`final_fs`, the package's stops then "heal", at its end)."""
    invoked = invocations(history_ops)
    kept = invoked[:len(invoked) - _final_phase_length(invoked, final_fs, time_limit)]
    return [TimedOp(op["time"] / NS_PER_SECOND, op["f"], op.get("value"), op.get("fault"))
            for op in kept]


def _final_phase_length(invoked: Sequence[Mapping[str, Any]], final_fs: Sequence[str],
                        time_limit: float) -> int:
    """How many invocations at the end are the final phase: all of `final_fs` when the run
    got to its heal; in a run cut short during it, the longest start of `final_fs` invoked
    after the time limit (the schedule itself may end with a stop like the final phase's)."""
    limit_ns = time_limit * NS_PER_SECOND
    for count in range(min(len(final_fs), len(invoked)), 0, -1):
        tail = invoked[len(invoked) - count:]
        if [op.get("f") for op in tail] != list(final_fs[:count]):
            continue
        if count == len(final_fs) or all(op["time"] >= limit_ns for op in tail):
            return count
    return 0


def episodes(ops: Sequence[TimedOp]) -> list[Episode]:
    """The ops grouped into faults, in order of start: each start op with the first later
    op that stops its kind of fault (FIFO when faults of one kind overlap); a one-shot op,
    or a stop without a start, alone."""
    found: list[Episode] = []
    open_by_stop: dict[str, list[int]] = {}
    for op in ops:
        waiting = open_by_stop.get(op.f)
        if waiting:
            position = waiting.pop(0)
            found[position] = replace(found[position], stop=op)
            continue
        found.append(Episode(op))
        if op.f in STOPS:
            open_by_stop.setdefault(STOPS[op.f], []).append(len(found) - 1)
    return found


def ops_of(chosen: Iterable[Episode]) -> list[TimedOp]:
    """The episodes' ops in time order (a start before its stop when they tie)."""
    ops: list[tuple[float, int, int, TimedOp]] = []
    for number, episode in enumerate(chosen):
        ops.append((episode.start.seconds, number, 0, episode.start))
        if episode.stop is not None:
            ops.append((episode.stop.seconds, number, 1, episode.stop))
    return [op for *_, op in sorted(ops, key=lambda item: item[:3])]


def cut_time_limit(ops: Sequence[TimedOp], time_limit: float, margin: float) -> float:
    """The time limit cut to `margin` seconds after the last op, rounded up to a whole
    second (never longer than it was)."""
    last = max((op.seconds for op in ops), default=0.0)
    return min(time_limit, float(math.ceil(last + margin)))


def halve_holds(chosen: Sequence[Episode], which: Iterable[int] | None = None,
                min_hold: float = 1.0) -> list[Episode] | None:
    """The episodes with the holds of those numbered `which` (default all) halved: each
    stop moved earlier, to halfway between its start and where it was; a hold that would
    fall below `min_hold` seconds is kept. None when nothing changes."""
    numbers = set(range(len(chosen)) if which is None else which)
    changed = False
    result = []
    for number, episode in enumerate(chosen):
        hold = episode.hold
        if number in numbers and hold is not None and hold / 2 >= min_hold:
            stop = replace(episode.stop, seconds=round(episode.start.seconds + hold / 2, 6))
            episode = replace(episode, stop=stop)
            changed = True
        result.append(episode)
    return result if changed else None


# --- the file -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleFile:
    """A replayable schedule: the ops, the seed, the time limit and the configuration."""

    ops: tuple[TimedOp, ...]
    seed: int
    time_limit: float
    config: Mapping[str, Any]
    source: Mapping[str, Any] = field(default_factory=dict)

    @property
    def anomalies(self) -> list[str] | None:
        """The anomaly types this schedule is expected to show (None: not known)."""
        found = self.source.get("anomalies")
        return list(found) if isinstance(found, list) else None

    @property
    def failing(self) -> list[str] | None:
        """Those of `anomalies` that the configuration does not allow (None: not known)."""
        found = self.source.get("failing")
        return list(found) if isinstance(found, list) else None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": VERSION, "source": dict(self.source),
                "seed": self.seed, "time_limit": self.time_limit, "config": dict(self.config),
                "ops": [{"seconds": round(op.seconds, 6), "f": op.f, "value": op.value,
                         **({"fault": op.fault} if op.fault is not None else {})}
                        for op in self.ops]}

    @classmethod
    def from_json(cls, data: Any, where: str) -> ScheduleFile:
        """The schedule in `data` (a parsed file named `where`); ScheduleError if malformed."""
        def fail(path: str, what: str, todo: str = "fix it or write the file again with "
                                                    "`kchaos shrink`") -> ScheduleError:
            return ScheduleError(f"{where}: {path}: {what}; {todo}")

        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise fail("format", f"not a kchaos schedule (expected \"format\": \"{FORMAT}\")",
                       "give a file written by `kchaos shrink`, or a run folder")
        if data.get("version") != VERSION:
            raise fail("version", f"version {data.get('version')!r} is not supported",
                       f"this kchaos reads version {VERSION}")
        seed, limit, config = data.get("seed"), data.get("time_limit"), data.get("config")
        if not isinstance(seed, int) or isinstance(seed, bool):
            raise fail("seed", f"must be an integer, got {seed!r}")
        if not _number(limit) or limit <= 0:
            raise fail("time_limit", f"must be a number of seconds > 0, got {limit!r}")
        if not isinstance(config, dict) or not isinstance(config.get("run"), dict):
            raise fail("config", "must be test.json's \"config\" (an object with a \"run\" "
                       "section, and backend, db, workload, nemesis)")
        source = data.get("source", {})
        if not isinstance(source, dict):
            raise fail("source", f"must be an object, got {source!r}")
        raw_ops = data.get("ops")
        if not isinstance(raw_ops, list):
            raise fail("ops", f"must be a list of {{seconds, f, value}}, got {raw_ops!r}")
        ops = []
        for number, raw in enumerate(raw_ops):
            path = f"ops[{number}]"
            if not isinstance(raw, dict):
                raise fail(path, f"must be an object {{seconds, f, value}}, got {raw!r}")
            seconds, f = raw.get("seconds"), raw.get("f")
            if not _number(seconds) or seconds < 0:
                raise fail(f"{path}.seconds", f"must be a number >= 0, got {seconds!r}")
            if not isinstance(f, str) or not f:
                raise fail(f"{path}.f", f"must be a nemesis op name, got {f!r}")
            if ops and seconds < ops[-1].seconds:
                raise fail(f"{path}.seconds", f"{seconds} is before ops[{number - 1}]'s "
                           f"{ops[-1].seconds}", "ops must be in time order")
            if seconds > limit + PAST_LIMIT:
                raise fail(f"{path}.seconds", f"{seconds} is past the time limit {limit}, "
                           f"so it would never be invoked", "raise time_limit or remove the op")
            fault = raw.get("fault")
            ops.append(TimedOp(float(seconds), f, raw.get("value"),
                               fault if isinstance(fault, str) else None))
        return cls(tuple(ops), seed, float(limit), config, source)


def _number(value: Any) -> bool:
    return (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value))


def read_schedule(path: Path) -> ScheduleFile:
    """The schedule file at `path`; ScheduleError saying what is wrong and where."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as error:
        raise ScheduleError(f"{path}: cannot read: {error.strerror}") from error
    except json.JSONDecodeError as error:
        raise ScheduleError(f"{path}: line {error.lineno} column {error.colno}: not valid "
                            f"JSON ({error.msg}); a schedule file is JSON written by "
                            f"`kchaos shrink`") from error
    return ScheduleFile.from_json(data, str(path))


def write_schedule(path: Path, schedule: ScheduleFile) -> None:
    """Write `schedule` to `path` atomically (a temporary file, then a rename)."""
    path = Path(path)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(json.dumps(schedule.to_json(), indent=1) + "\n")
    temporary.replace(path)
