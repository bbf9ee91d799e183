"""The report of a 100,000-op queue history: prints the seconds `write_report` takes.

    .venv/bin/python bench/report.py [--ops 100000] [--keep DIR]

The run folder is generated first (history, controller event log, results from the
real queue, acks and election checkers; not timed); the target is <= 10 s, and the script
exits 1 when it is missed.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.targets import Target, exit_status  # noqa: E402
from checker.cluster.elections import ElectionChecker  # noqa: E402
from checker.core import compose  # noqa: E402
from checker.history import HistoryWriter, load_history  # noqa: E402
from checker.queue.acks import AcksChecker  # noqa: E402
from checker.queue.analysis import QueueChecker  # noqa: E402
from harness.store import run_files  # noqa: E402
from reports import write_report  # noqa: E402

START_MS = 1_735_689_600_000
KEYS = 16
PROCESSES = 8
NS = 1_000_000_000


def generate(run: Path, ops: int, seed: int = 7) -> None:
    """A seeded queue history of `ops` ops with partitions every 20 s, and its results."""
    rng = random.Random(seed)
    logs: dict[int, int] = dict.fromkeys(range(KEYS), 0)
    clock = [0]
    history = run / "history.jsonl"
    value = 0
    partitioned = False
    with HistoryWriter(history, clock=lambda: clock[0]) as writer:
        written = 0
        while written < ops:
            clock[0] += rng.randint(100_000, 900_000)
            if partitioned != (5 <= clock[0] // NS % 20 < 12):
                partitioned = not partitioned
                writer.append({"type": "info", "process": "nemesis",
                               "f": "start-partition" if partitioned else "stop-partition",
                               "value": {"n1": ["n2", "n3"]} if partitioned else "healed"})
                written += 1
            process = rng.randrange(PROCESSES)
            if process < 6:
                key = rng.randrange(KEYS)
                value += 1
                writer.append({"type": "invoke", "process": process, "f": "send",
                               "value": [["send", key, value]], "acks": "all"})
                clock[0] += rng.randint(500_000, 5_000_000)
                writer.append({"type": "ok", "process": process, "f": "send",
                               "value": [["send", key, [logs[key], value]]]})
                logs[key] += 1
                written += 2
            else:
                writer.append({"type": "invoke", "process": process, "f": "poll",
                               "value": [["poll"]]})
                clock[0] += rng.randint(500_000, 2_000_000)
                writer.append({"type": "ok", "process": process, "f": "poll",
                               "value": [["poll", {}]]})
                written += 2
    test = {"name": "bench-report", "seed": seed, "acks": "all", "start_wall_ms": START_MS,
            "broker_config": {"min.insync.replicas": 2}, "final_reads": False}
    (run / "test.json").write_text(json.dumps(test))
    events = run / "nodes" / "n1" / "data"
    events.mkdir(parents=True)
    with open(events / "controller-events.jsonl", "w") as out:
        for second in range(5, clock[0] // NS, 20):
            for key in range(KEYS):
                out.write(json.dumps({
                    "time": START_MS + second * 1000, "controller_id": 1,
                    "controller_epoch": 1, "event": "elect-leader", "topic": "kchaos",
                    "partition": key, "selector": "offline", "old_leader": 1 + second % 3,
                    "new_leader": 1 + (second + 1) % 3, "leader_epoch": second,
                    "isr": [1, 2], "unclean": False}) + "\n")
    results = compose({"queue": QueueChecker(), "acks": AcksChecker(),
                       "elections": ElectionChecker()}).check(
        test, load_history(history), {"store_dir": str(run)})
    (run / "results.json").write_text(json.dumps(results.to_json()))


def targets(report_seconds: float) -> list[Target]:
    """The target of the report's seconds."""
    return [Target("write_report", report_seconds, 10)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--keep", type=Path, help="write the run here instead of a temp dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        run = args.keep or Path(scratch) / "bench-report" / "20250101T000000"
        run.mkdir(parents=True, exist_ok=True)
        generate(run, args.ops)
        lines = sum(1 for _ in open(run / "history.jsonl"))
        started = time.monotonic()
        report = write_report(run_files(run))
        seconds = time.monotonic() - started
    print(f"report of a {lines}-op history: {seconds:.2f} s "
          f"({len(report.plots)} plots, verdict {report.verdict}); target <= 10 s")
    return exit_status(targets(seconds))


if __name__ == "__main__":
    sys.exit(main())
