"""Benchmark: a synthetic 1,000,000-op queue history checked through Spark local on 2 cores.

    .venv/bin/python bench/queue_checker.py [--ops 1000000] [--keys 8] [--master local[2]]

Generates a queue-workload history (sends and polls by many processes over a few
keys, then final reads draining every key) with anomalies of every type injected
at known places, checks it with the queue, acks and election checkers through
`checker.spark.check_history_on_spark`, prints seconds for generation, Spark
start, loading and checking, and exits 1 unless every injected anomaly was found.
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from checker.acks import AcksChecker  # noqa: E402
from checker.elections import ElectionChecker  # noqa: E402
from checker.queue import QueueChecker  # noqa: E402
from checker.spark import check_history_on_spark, spark_session  # noqa: E402

HOLE = object()
INJECTIONS_PER_TYPE = 5
POLL_BATCH = 32
DRAIN_BATCH = 2000


class Writer:
    """Writes history lines fast (f-strings, not json.dumps) with dense indices."""

    def __init__(self, out) -> None:
        self.out = out
        self.index = 0
        self.time = 0

    def line(self, kind: str, process: int, f: str, value: str) -> None:
        self.time += 1000
        self.out.write(f'{{"index": {self.index}, "time": {self.time}, "type": "{kind}", '
                       f'"process": {process}, "f": "{f}", "value": {value}}}\n')
        self.index += 1


def generate(path: Path, ops: int, keys: int, processes: int, seed: int) -> Counter:
    """Write the history; returns how many anomalies of each type were injected."""
    rng = random.Random(seed)
    logs: list[list] = [[] for _ in range(keys)]
    positions = [[0] * keys for _ in range(processes)]
    injected: Counter = Counter()
    next_value = 0
    budget = ops
    plan = {kind: sorted(rng.sample(range(budget // 4, budget // 2), INJECTIONS_PER_TYPE))
            for kind in ("lost-write", "duplicate", "inconsistent-offsets", "G1a", "poll-skip",
                         "nonmonotonic-poll", "int-poll-skip", "int-nonmonotonic-poll",
                         "nonmonotonic-send")}
    triggers = {at: kind for kind, ats in plan.items() for at in ats}
    with open(path, "w", encoding="utf-8") as out:
        w = Writer(out)
        while w.index < budget:
            kind = triggers.pop(w.index, None) or triggers.pop(w.index + 1, None)
            process = rng.randrange(processes)
            key = rng.randrange(keys)
            log = logs[key]
            if kind == "nonmonotonic-send":
                a, b = next_value, next_value + 1
                next_value += 2
                w.line("invoke", process, "send", f'[["send", {key}, {a}], ["send", {key}, {b}]]')
                log.extend((b, a))
                off = len(log) - 2
                w.line("ok", process, "send",
                       f'[["send", {key}, [{off + 1}, {a}]], ["send", {key}, [{off}, {b}]]]')
            elif kind in ("lost-write", "duplicate", "G1a") or (not kind and rng.random() < 0.5):
                value = next_value
                next_value += 1
                w.line("invoke", process, "send", f'[["send", {key}, {value}]]')
                if kind == "G1a":
                    log.append(value)
                    w.line("fail", process, "send", f'[["send", {key}, {value}]]')
                else:
                    log.append(HOLE if kind == "lost-write" else value)
                    w.line("ok", process, "send", f'[["send", {key}, [{len(log) - 1}, {value}]]]')
                    if kind == "duplicate":
                        log.append(value)
                if kind:
                    injected[kind] += 1
                continue
            else:
                records = _poll(rng, log, positions[process][key], kind)
                if kind and records is None:
                    triggers[w.index + 2] = kind
                    kind = None
                    records = _poll(rng, log, positions[process][key], None)
                w.line("invoke", process, "poll", '[["poll"]]')
                w.line("ok", process, "poll", _poll_value(key, records))
                if records:
                    positions[process][key] = max(o for o, _ in records) + 1
            if kind:
                injected[kind] += 1
        drainer = processes
        for key, log in enumerate(logs):
            for start in range(0, len(log), DRAIN_BATCH):
                records = [(o, log[o]) for o in range(start, min(len(log), start + DRAIN_BATCH))
                           if log[o] is not HOLE]
                w.line("invoke", drainer, "poll", '[["poll"]]')
                w.line("ok", drainer, "poll", _poll_value(key, records))
            w.line("invoke", drainer, "assign", "[]")
            w.line("ok", drainer, "assign", "[]")
        for _ in range(INJECTIONS_PER_TYPE):
            key = rng.randrange(keys)
            logs[key].append(next_value)
            w.line("invoke", processes + 1, "send", f'[["send", {key}, {next_value}]]')
            w.line("ok", processes + 1, "send",
                   f'[["send", {key}, [{len(logs[key]) - 1}, {next_value}]]]')
            next_value += 1
            injected["unseen"] += 1
    return injected


def _poll(rng: random.Random, log: list, position: int, kind: str | None) -> list | None:
    """The records of one poll from `position`, with `kind` injected; None if it cannot be."""
    start = position
    if kind == "nonmonotonic-poll":
        start -= 2
    elif kind == "poll-skip":
        start += 2
    end = min(len(log), start + rng.randrange(1, POLL_BATCH))
    records = [(o, log[o]) for o in range(start, end) if log[o] is not HOLE]
    needed = {"int-poll-skip": 3, "int-nonmonotonic-poll": 2}.get(kind, 1)
    if kind and (position < 3 or len(records) < needed):
        return None
    if kind == "int-poll-skip":
        del records[1]
    elif kind == "int-nonmonotonic-poll":
        records[0], records[1] = records[1], records[0]
    elif kind == "inconsistent-offsets":
        records[0] = (records[0][0], -1 - records[0][0])
    return records


def _poll_value(key: int, records: list) -> str:
    pairs = ", ".join(f"[{o}, {v}]" for o, v in records)
    return f'[["poll", {{"{key}": [{pairs}]}}]]'


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ops", type=int, default=1_000_000)
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--seed", type=int, default=5)
    parser.add_argument("--master", default="local[2]")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kchaos-bench-") as scratch:
        path = Path(scratch) / "history.jsonl"
        started = time.monotonic()
        injected = generate(path, args.ops, args.keys, args.processes, args.seed)
        lines = sum(1 for _ in open(path, "rb"))
        print(f"generation: {time.monotonic() - started:.1f} s "
              f"({lines} ops, {path.stat().st_size / 1e6:.0f} MB, injected {dict(injected)})")
        started = time.monotonic()
        with spark_session(args.master, app_name="kchaos-bench") as session:
            print(f"spark start: {time.monotonic() - started:.1f} s")
            test = {"acks": "all", "broker_config": {"min.insync.replicas": 2},
                    "start_wall_ms": 0}
            checkers = {"queue": QueueChecker(), "acks": AcksChecker(),
                        "elections": ElectionChecker()}
            timings: dict[str, float] = {}
            started = time.monotonic()
            results = check_history_on_spark(session, test, path, checkers, timings=timings)
            total = time.monotonic() - started
    print(f"loading (parse and partition by key on executors): {timings['load']:.1f} s")
    print(f"checking (per key on executors, then fold): {timings['check']:.1f} s")
    print(f"loading + checking: {total:.1f} s; verdict {results.valid}")
    queue = results.checkers["queue"]
    missed = [kind for kind, count in injected.items()
              if kind not in queue.anomalies or queue.anomalies[kind].count < count]
    for kind, anomaly in sorted(queue.anomalies.items()):
        print(f"  {kind}: {anomaly.count} found, {injected.get(kind, 0)} injected")
    if missed:
        print(f"MISSED: {missed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
