"""`kchaos shrink`: the smallest fault schedule that still shows a run's anomalies.

    Shrink(schedule, target, folder, ...).run()

The schedule's ops are grouped into episodes (a fault's start with its stop, a one-shot op
alone; `nemesis.schedule.episodes`). Each candidate is a schedule replayed as one run
(`harness.replay.replay`), and it *reproduces* when its run shows every anomaly type of the
target (by default the source's failing types). Runs are not deterministic (the cluster's
timing differs), so a candidate gets up to `tries` runs and reproduces when any one of
them does; a run that errs (exit 3) does not reproduce, and two in a row stop the shrink.

1. ddmin over the episodes (`harness.ddmin`), at the source's time limit;
2. shortening: the time limit cut to `margin` seconds after the last op, then the holds
   halved (the stops moved earlier), all at once, else one episode at a time, while a
   halving reproduces and holds stay at least `MIN_HOLD` seconds.

Every candidate is a schedule file in the shrink folder (`candidate-K.json`), and after
each one the folder gets the smallest reproducing schedule so far (`schedule.json`,
replayable with `kchaos replay`) and the report of the steps (`shrink.md`). It stops when
done, when the budget (runs, minutes) is spent, on Ctrl-C, or after two runs in a row
that erred.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness.ddmin import Exhausted, ddmin
from nemesis.schedule import (
    Episode,
    ScheduleFile,
    cut_time_limit,
    episodes,
    halve_holds,
    ops_of,
    write_schedule,
)

__all__ = ["MIN_HOLD", "REPORT_FILE", "Attempt", "Candidate", "Shrink", "shrink_folder",
           "target_of"]

REPORT_FILE = "shrink.md"
BEST_FILE = "schedule.json"
MIN_HOLD = 1.0  # seconds: a hold is not halved below this
ERRORS_IN_A_ROW = 2

Numbered = tuple[tuple[int, Episode], ...]  # episodes by their number in the source (from 1)


@dataclass(frozen=True)
class Attempt:
    """One replay run of a candidate."""

    run_dir: Path | None
    exit_code: int
    anomalies: list[str] | None  # every anomaly type found; None: the run was not checked
    seconds: float


@dataclass
class Candidate:
    number: int
    phase: str
    episodes: Numbered
    time_limit: float
    attempts: list[Attempt] = field(default_factory=list)
    reproduced: bool = False


RunOne = Callable[[ScheduleFile, Path], Attempt]


def shrink_folder(store: Path, schedule: ScheduleFile, now: float | None = None) -> Path:
    """A new folder `store/<test-name>/<stamp>-shrink/` (beside the runs, not one of them)."""
    run = schedule.config.get("run", {})
    name = run.get("name") or run.get("workload") or "queue"
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(now))
    folder = Path(store) / name / f"{stamp}-shrink"
    suffix = 1
    while folder.exists():
        suffix += 1
        folder = Path(store) / name / f"{stamp}-shrink-{suffix}"
    folder.mkdir(parents=True)
    return folder


class Shrink:
    """One shrink: its budget, the candidates asked so far and the best one."""

    def __init__(self, schedule: ScheduleFile, target: Sequence[str], folder: Path,
                 run_one: RunOne, *, max_runs: int = 12, max_minutes: float | None = 60.0,
                 tries: int = 1, margin: float = 5.0, out: TextIO = sys.stdout,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.source = schedule
        self.target = list(target)
        self.folder = Path(folder)
        self.run_one = run_one
        self.max_runs, self.max_minutes, self.tries, self.margin = (max_runs, max_minutes,
                                                                    tries, margin)
        self.out = out
        self.clock = clock
        self.started = clock()
        self.original: Numbered = tuple(enumerate(episodes(schedule.ops), start=1))
        self.best: Numbered = self.original
        self.best_limit = schedule.time_limit
        self.candidates: list[Candidate] = []
        self.asked: dict[tuple[Any, ...], bool] = {}
        self.stopped = "not started"
        self.errors_in_a_row = 0
        self.failed = False  # stopped by Ctrl-C or errors rather than done or out of budget
        self.cut = True  # False once cutting the time limit did not reproduce
        self.interrupted = threading.Event()  # set by Ctrl-C while `run` runs

    # -- the search --------------------------------------------------------------------------

    def run(self) -> Shrink:
        """Shrink until done or stopped; the folder always holds the best schedule so far."""
        self._write()
        self._say(f"{len(self.original)} episodes, target {', '.join(self.target)}, at most "
                  f"{self.max_runs} runs" + (f" and {self.max_minutes:g} min"
                                             if self.max_minutes else ""))
        try:
            with _interrupts_noted() as self.interrupted:
                ddmin(list(self.original), lambda subset: self._ask("ddmin", subset,
                                                                    self.best_limit))
                if self.stopped == "not started":
                    self._shorten()
                    self.stopped = "done: no smaller candidate reproduces"
        except Exhausted:
            pass
        except KeyboardInterrupt:
            self.stopped, self.failed = "interrupted (Ctrl-C)", True
        except Exception as error:  # a run that could not even start: say so, keep the files
            self.stopped = f"stopped by an error: {type(error).__name__}: {error}"
            self.failed = True
        self._write()
        return self

    def _shorten(self) -> None:
        """The ddmin result (`self.best`) with a shorter time limit, then shorter holds;
        when cutting the time limit does not reproduce, later candidates keep it."""
        limit = self._cut(self.best)
        if limit < self.best_limit and not self._ask("cut time limit", self.best, limit):
            self.cut = False
        while (halved := self._halved(None)) is not None:
            if self._ask("halve every hold", halved, self._cut(halved)):
                continue
            holdable = [n for n, (_, e) in enumerate(self.best)
                        if e.hold is not None and e.hold / 2 >= MIN_HOLD]
            if len(holdable) < 2 or not any(
                    self._ask(f"halve hold of episode {self.best[n][0]}", one, self._cut(one))
                    for n in holdable if (one := self._halved([n])) is not None):
                return

    def _halved(self, which: list[int] | None) -> Numbered | None:
        halved = halve_holds([e for _, e in self.best], which, MIN_HOLD)
        if halved is None:
            return None
        return tuple((number, e) for (number, _), e in zip(self.best, halved, strict=True))

    def _cut(self, chosen: Numbered) -> float:
        if not self.cut:
            return self.best_limit
        return cut_time_limit(ops_of(e for _, e in chosen), self.best_limit, self.margin)

    def _ask(self, phase: str, chosen: Sequence[tuple[int, Episode]], limit: float) -> bool:
        """Replay `chosen` at `limit` (up to `tries` runs): does the target reappear?"""
        key = (tuple((number, e.start.seconds, e.end) for number, e in chosen), limit)
        if key in self.asked:
            return self.asked[key]
        self._stop_if_spent()
        candidate = Candidate(len(self.candidates) + 1, phase, tuple(chosen), limit)
        self.candidates.append(candidate)
        path = self.folder / f"candidate-{candidate.number:02d}.json"
        write_schedule(path, self._schedule(candidate.episodes, limit, candidate.number))
        self._say(f"candidate {candidate.number} ({phase}): episodes "
                  f"{_numbers(candidate.episodes)} of {len(self.original)}, {limit:g} s; run "
                  f"{self._runs() + 1} of at most {self.max_runs}, {self._elapsed()} elapsed")
        for _ in range(self.tries):
            if candidate.attempts and (self.interrupted.is_set() or self._spent()):
                break
            started = self.clock()
            attempt = self.run_one(self._schedule(candidate.episodes, limit, candidate.number),
                                   path)
            attempt = Attempt(attempt.run_dir, attempt.exit_code, attempt.anomalies,
                              self.clock() - started)
            candidate.attempts.append(attempt)
            self.errors_in_a_row = self.errors_in_a_row + 1 if attempt.anomalies is None else 0
            if self.reproduces(attempt.anomalies):
                candidate.reproduced = True
                self.best, self.best_limit = candidate.episodes, limit
                break
        self._say(f"candidate {candidate.number}: {_verdict(candidate)}")
        self.asked[key] = candidate.reproduced
        self._write()
        if self.interrupted.is_set():
            self.stopped, self.failed = "interrupted (Ctrl-C)", True
            raise Exhausted
        if self.errors_in_a_row >= ERRORS_IN_A_ROW:
            self.failed = True
            self.stopped = (f"{ERRORS_IN_A_ROW} runs in a row erred (see their kchaos.log); "
                            f"is the cluster healthy?")
            raise Exhausted
        return candidate.reproduced

    def reproduces(self, found: list[str] | None) -> bool:
        return found is not None and all(kind in found for kind in self.target)

    def _spent(self) -> str | None:
        """Why no other run may start, or None."""
        if self._runs() >= self.max_runs:
            return f"budget spent: {self.max_runs} runs"
        if self.max_minutes is not None and self.clock() - self.started >= self.max_minutes * 60:
            return f"budget spent: {self.max_minutes:g} minutes"
        return None

    def _stop_if_spent(self) -> None:
        spent = self._spent()
        if spent is not None:
            self.stopped = spent
            raise Exhausted

    def _runs(self) -> int:
        return sum(len(candidate.attempts) for candidate in self.candidates)

    # -- output ------------------------------------------------------------------------------

    def _schedule(self, chosen: Numbered, limit: float, number: int | None) -> ScheduleFile:
        failing = [kind for kind in self.target if kind in (self.source.failing or ())]
        source = {"run": self.source.source.get("run"), "anomalies": self.target,
                  "failing": failing, "shrink": str(self.folder), "candidate": number}
        return ScheduleFile(tuple(ops_of(e for _, e in chosen)), self.source.seed, limit,
                            self.source.config, source)

    def _write(self) -> None:
        write_schedule(self.folder / BEST_FILE, self._schedule(self.best, self.best_limit, None))
        (self.folder / REPORT_FILE).write_text(self.report())

    def _say(self, line: str) -> None:
        print(f"kchaos shrink: {line}", file=self.out, flush=True)

    def _elapsed(self) -> str:
        return f"{(self.clock() - self.started) / 60:.1f} min"

    def summary(self) -> str:
        return (f"{len(self.original)} episodes -> {len(self.best)}, time limit "
                f"{self.source.time_limit:g} s -> {self.best_limit:g} s, in {self._runs()} runs "
                f"({self._elapsed()}); {self.stopped}")

    def report(self) -> str:
        """shrink.md: the source, the rule, the result so far and every step."""
        best = self.folder / BEST_FILE
        lines = [
            "# kchaos shrink", "",
            f"- source: `{self.source.source.get('run') or 'a schedule file'}`, seed "
            f"{self.source.seed}, time limit {self.source.time_limit:g} s, "
            f"{len(self.original)} episodes",
            f"- target: {', '.join(self.target)}. A candidate reproduces when one of its runs "
            f"(up to {self.tries}) shows every target type; a run that erred does not.",
            f"- budget: {self.max_runs} runs" + (f", {self.max_minutes:g} minutes"
                                                 if self.max_minutes else "")
            + f"; used {self._runs()} runs in {self._elapsed()}",
            f"- status: {self.stopped}",
            f"- smallest reproducing schedule so far: {len(self.best)} episodes, time limit "
            f"{self.best_limit:g} s, in `{best}`; replay it with `kchaos replay {best}`",
            "", "## Smallest schedule so far", "",
            *(f"{number}. {episode.describe()}" for number, episode in self.best),
            "", "## Episodes of the source", "",
            *(f"{number}. {episode.describe()}" for number, episode in self.original),
            "", "## Steps", "",
            "| candidate | phase | episodes | time limit | verdict | anomalies found | run "
            "| minutes |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for candidate in self.candidates:
            for number, attempt in enumerate(candidate.attempts, start=1):
                step = f"{candidate.number}" + (f" (run {number})" if number > 1 else "")
                found = ("(no verdict)" if attempt.anomalies is None
                         else ", ".join(attempt.anomalies) or "none")
                run = "—" if attempt.run_dir is None else f"`{attempt.run_dir}`"
                lines.append(f"| {step} | {candidate.phase} | "
                             f"{self._shown(candidate.episodes)} | {candidate.time_limit:g} s | "
                             f"{self._verdict_of(attempt)} | {found} | {run} | "
                             f"{attempt.seconds / 60:.1f} |")
        return "\n".join(lines) + "\n"

    def _verdict_of(self, attempt: Attempt) -> str:
        if attempt.anomalies is None:
            return "error"
        return "reproduces" if self.reproduces(attempt.anomalies) else "does not reproduce"


    def _shown(self, chosen: Numbered) -> str:
        """Episode numbers, with the hold of each that is shorter than in the source."""
        source = dict(self.original)
        return ", ".join(f"{number} (hold {episode.hold:.3g} s)"
                         if episode.hold != source[number].hold else str(number)
                         for number, episode in chosen) or "none"


def _numbers(chosen: Numbered) -> str:
    return ", ".join(str(number) for number, _ in chosen) or "none"


def _verdict(candidate: Candidate) -> str:
    if candidate.reproduced:
        return "reproduces"
    if all(a.anomalies is None for a in candidate.attempts):
        return "error"
    return f"does not reproduce ({len(candidate.attempts)} runs)"


@contextlib.contextmanager
def _interrupts_noted() -> Iterator[threading.Event]:
    """An event set by Ctrl-C, which still interrupts as usual (the runner tears down)."""
    noted = threading.Event()
    if threading.current_thread() is not threading.main_thread():
        yield noted
        return

    def note(signum: int, frame: Any) -> None:
        noted.set()
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, note)
    try:
        yield noted
    finally:
        signal.signal(signal.SIGINT, previous)


def target_of(schedule: ScheduleFile, wanted: Sequence[str] | None, where: str) -> list[str]:
    """The anomaly types to keep: `wanted` (each one the source showed, allowed by its
    configuration or not), else every type that made the source invalid; ValueError when
    there is nothing to aim at."""
    found, failing = schedule.anomalies, schedule.failing
    if found is None:
        raise ValueError(f"{where}: the source was not checked (no results.json), so its "
                         f"anomalies are unknown; `kchaos check` it first")
    if wanted:
        unseen = [kind for kind in wanted if kind not in found]
        if unseen:
            raise ValueError(f"--anomaly {', '.join(unseen)}: the source did not show it; "
                             f"it showed: {', '.join(found) or 'none'}")
        return list(dict.fromkeys(wanted))
    if failing:
        return list(failing)
    if found:
        raise ValueError(f"{where}: the source is valid for its configuration (it allows "
                         f"{', '.join(found)}); name the type to keep with --anomaly TYPE")
    raise ValueError(f"{where}: the source showed no anomalies, nothing to shrink toward")
