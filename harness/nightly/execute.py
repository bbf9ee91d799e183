"""The night's runs, each a child process `kchaos run --config <cell>.seed<S>.toml`.

A child is isolated: a harness error or a crash in one run ends that run only, and
logging and signal handling stay per process. Its options are the cell's with the
seed, the night folder as store and `no_check = true` (it ends once the history and
node logs are stored; the night checks every run afterwards in one Spark job). Its
output goes to `logs/<cell>.seed<S>.log`; the run folder is the one its first line
names ("kchaos: run DIR").

`--parallel N` runs N children at once; the local backend gives each its own prefix
and /24. `fits(...)` refuses a parallelism the machine has no room for: more runs than
cores, or more memory than /proc/meminfo's MemAvailable, estimated per run from its
brokers (per db), its ZooKeepers and the harness with its clients.

The budget (minutes for the runs, summed over resumed sessions) is kept by not starting
a run that would end past it, by the estimate of its length: its time limit plus the
mean overhead (setup, recovery, final reads, log collection) of the runs so far (60 s
before any has finished). Such runs are `skipped`.
"""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from harness.nightly.plan import Cell, toml_text
from harness.nightly.state import ERROR, PENDING, RUNNING, SKIPPED, STORED, Night, RunRecord

__all__ = ["MEMORY_MB", "Resources", "execute", "fits", "run_memory_mb"]

# Resident memory per process, MB, measured on this machine with margin: our broker
# ~45 MB (grows with its logs), ZooKeeper (-Xmx128m) ~90-140 MB, a `kchaos run` child
# with its clients ~120 MB; a Kafka broker is its 768m heap plus the JVM's own.
MEMORY_MB = {"broker:kchaos": 100, "broker:kafka": 1100, "broker:other": 1100,
             "zookeeper": 200, "harness": 250}
DEFAULT_OVERHEAD_S = 60.0
RUN_LINE = "kchaos: run "


def run_memory_mb(cell: Cell) -> int:
    broker = MEMORY_MB.get(f"broker:{cell.db}", MEMORY_MB["broker:other"])
    return cell.nodes * broker + max(cell.zookeepers, 1) * MEMORY_MB["zookeeper"] \
        + MEMORY_MB["harness"]


@dataclass(frozen=True)
class Resources:
    cores: int
    available_mb: int

    @classmethod
    def of_machine(cls) -> Resources:
        available = 0
        try:
            for line in Path("/proc/meminfo").read_text().splitlines():
                if line.startswith("MemAvailable:"):
                    available = int(line.split()[1]) // 1024
        except OSError:
            pass
        return cls(os.cpu_count() or 1, available)


def fits(parallel: int, cells: Sequence[Cell], machine: Resources) -> str | None:
    """None when `parallel` runs of the largest cell fit the machine, else the reason."""
    if parallel <= 1:
        return None
    if parallel > machine.cores:
        return (f"--parallel {parallel} needs {parallel} cores (a run's brokers, ZooKeepers "
                f"and clients need at least one), this machine has {machine.cores}")
    largest = max(cells, key=run_memory_mb)
    need = parallel * run_memory_mb(largest)
    if need > machine.available_mb:
        return (f"--parallel {parallel} needs about {need} MB ({parallel} x "
                f"{run_memory_mb(largest)} MB for cell {largest.name}: {largest.nodes} "
                f"{largest.db} brokers, {max(largest.zookeepers, 1)} ZooKeepers, the "
                f"harness), MemAvailable is {machine.available_mb} MB")
    return None


def _clock(seconds: float) -> str:
    seconds = int(max(0, seconds))
    hours, rest = divmod(seconds, 3600)
    return f"{hours}h{rest // 60:02d}m" if hours else f"{rest // 60}m{rest % 60:02d}s"


@dataclass
class _Child:
    record: RunRecord
    cell: Cell
    popen: subprocess.Popen
    log: Path
    started: float


class _Interrupted(Exception):
    pass


def execute(night: Night, cells: dict[str, Cell], parallel: int, budget_minutes: float | None,
            out: TextIO = sys.stdout, command: Sequence[str] | None = None,
            now: Callable[[], float] = time.monotonic) -> bool:
    """Run every pending run of the night; False when the night was interrupted."""
    command = list(command or [sys.executable, "-m", "harness.cli", "run"])
    night.logs.mkdir(exist_ok=True)
    total = len(night.runs)
    pending = [r for r in night.runs if r.status == PENDING]

    overheads = [r.seconds - cells[r.cell].time_limit for r in night.runs
                 if r.status == STORED and r.seconds is not None]
    session_start = now()
    elapsed_before = float(night.state.get("elapsed_seconds", 0.0))
    running: list[_Child] = []

    def elapsed() -> float:
        return elapsed_before + now() - session_start

    def estimate(cell: Cell) -> float:
        overhead = sum(overheads) / len(overheads) if overheads else DEFAULT_OVERHEAD_S
        return cell.time_limit + max(0.0, overhead)

    def remaining() -> float:
        left = sum(estimate(cells[r.cell]) for r in pending)
        left += sum(max(0.0, estimate(c.cell) - (now() - c.started)) for c in running)
        return left / max(1, parallel)

    def progress(record: RunRecord, what: str) -> None:
        print(f"[{night.runs.index(record) + 1}/{total}] {record.cell} seed={record.seed} "
              f"{what}  "
              f"elapsed {_clock(elapsed())}, estimated remaining {_clock(remaining())}",
              file=out, flush=True)

    previous = signal.signal(signal.SIGTERM, _raise_interrupted)
    try:
        while pending or running:
            while pending and len(running) < parallel:
                record = pending.pop(0)
                cell = cells[record.cell]
                if budget_minutes is not None and \
                        elapsed() + estimate(cell) > budget_minutes * 60:
                    record.status = SKIPPED
                    record.error = (f"not started: about {estimate(cell):.0f} s more would "
                                    f"pass the budget of {budget_minutes:g} min "
                                    f"({_clock(elapsed())} used)")
                    night.save()
                    progress(record, "skipped (budget)")
                    continue
                running.append(_start(night, record, cell, command, now()))
                night.save()
                progress(record, "started")
            time.sleep(0.5)
            for child in [c for c in running if c.popen.poll() is not None]:
                running.remove(child)
                _finish(night, child, now())
                if child.record.status == STORED:
                    overheads.append(child.record.seconds - child.cell.time_limit)
                night.state["elapsed_seconds"] = round(elapsed(), 1)
                night.save()
                record = child.record
                if record.status == STORED:
                    progress(record, f"stored in {record.seconds:.0f} s ({record.run_dir})")
                else:
                    progress(record, f"FAILED (exit {record.exit}): {record.error}")
        return True
    except (KeyboardInterrupt, _Interrupted):
        print(f"kchaos nightly: interrupted; stopping {len(running)} run(s) (each tears its "
              f"cluster down); `kchaos nightly --resume` continues", file=out, flush=True)
        for child in running:
            if child.popen.poll() is None:
                child.popen.send_signal(signal.SIGTERM)
        for child in running:
            try:
                child.popen.wait(timeout=90)
            except subprocess.TimeoutExpired:
                child.popen.kill()
                child.popen.wait()
            child.record.run_dir = child.record.run_dir or _run_dir_of(night, child.log)
        night.state["elapsed_seconds"] = round(elapsed(), 1)
        night.save()
        return False
    finally:
        signal.signal(signal.SIGTERM, previous)


def _raise_interrupted(signum: int, frame: Any) -> None:
    raise _Interrupted(signal.Signals(signum).name)


def _start(night: Night, record: RunRecord, cell: Cell, command: list[str],
           started: float) -> _Child:
    config = night.logs / f"{record.key}.toml"
    config.write_text(toml_text(cell.run_options(record.seed, night.folder)),
                      encoding="utf-8")
    log = night.logs / f"{record.key}.log"
    record.status = RUNNING
    record.started = datetime.datetime.now().isoformat(timespec="seconds")
    with open(log, "w", encoding="utf-8") as handle:
        popen = subprocess.Popen([*command, "--config", str(config)], stdout=handle,
                                 stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    return _Child(record, cell, popen, log, started)


def _run_dir_of(night: Night, log: Path) -> str | None:
    """The run folder a child's output names, relative to the night folder."""
    try:
        for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith(RUN_LINE):
                path = Path(line[len(RUN_LINE):].split("  (")[0].strip())
                try:
                    return str(path.resolve().relative_to(night.folder.resolve()))
                except ValueError:
                    return str(path)
    except OSError:
        pass
    return None


def _finish(night: Night, child: _Child, ended: float) -> None:
    record = child.record
    record.exit = child.popen.returncode
    record.seconds = round(ended - child.started, 1)
    record.run_dir = _run_dir_of(night, child.log)
    history = night.folder / record.run_dir / "history.jsonl" if record.run_dir else None
    if record.exit == 0 and history is not None and history.is_file():
        record.status = STORED
        return
    record.status = ERROR
    record.error = _last_line(child.log) or f"exit {record.exit}"


def _last_line(log: Path) -> str | None:
    try:
        lines = [ln.strip() for ln in log.read_text(encoding="utf-8",
                                                    errors="replace").splitlines()
                 if ln.strip() and not ln.startswith("[")]
    except OSError:
        return None
    return lines[-1][:500] if lines else None
