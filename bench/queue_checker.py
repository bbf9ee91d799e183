"""Benchmark: a synthetic 1,000,000-op queue history checked through Spark local on 2 cores.

    .venv/bin/python bench/queue_checker.py [--ops 1000000] [--keys 8] [--master local[2]]
                                            [--txn]

Generates a queue-workload history (sends and polls by many processes over a few
keys, then final reads draining every key) with anomalies of every type injected
at known places, checks it with the queue, acks and election checkers through
`checker.spark.check_history_on_spark`, prints seconds for generation, Spark
start, loading and checking, and exits 1 unless every injected anomaly was found.
With `--txn`, a fifth of the steps are transactions (a send and a poll, committed one
at a time, so they form a large acyclic dependency graph), cycles (G0, G1c with wr
edges only, G1c with a ww edge) are injected on keys of their own, and the txn
checker runs too.
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

from checker.cluster.elections import ElectionChecker  # noqa: E402
from checker.queue.acks import AcksChecker  # noqa: E402
from checker.queue.analysis import QueueChecker  # noqa: E402
from checker.spark import check_history_on_spark, spark_session  # noqa: E402
from checker.txn.checker import TxnChecker  # noqa: E402

HOLE = object()
INJECTIONS_PER_TYPE = 5
POLL_BATCH = 32
DRAIN_BATCH = 2000
TXN_SHARE = 0.2
CYCLES = ("G0", "G1c", "G1c-ww")


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


def generate(path: Path, ops: int, keys: int, processes: int, seed: int,
             txn: bool = False) -> Counter:
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
                         "nonmonotonic-send", "int-nonmonotonic-send")}
    triggers = {at: kind for kind, ats in plan.items() for at in ats}
    with open(path, "w", encoding="utf-8") as out:
        w = Writer(out)
        while w.index < budget:
            kind = triggers.pop(w.index, None) or triggers.pop(w.index + 1, None)
            process = rng.randrange(processes)
            key = rng.randrange(keys)
            log = logs[key]
            if kind == "int-nonmonotonic-send":
                a, b = next_value, next_value + 1
                next_value += 2
                w.line("invoke", process, "send", f'[["send", {key}, {a}], ["send", {key}, {b}]]')
                log.extend((b, a))
                off = len(log) - 2
                w.line("ok", process, "send",
                       f'[["send", {key}, [{off + 1}, {a}]], ["send", {key}, [{off}, {b}]]]')
            elif kind == "nonmonotonic-send":
                a, b = next_value, next_value + 1
                next_value += 2
                log.extend((b, a))
                off = len(log) - 2
                for value, offset in ((a, off + 1), (b, off)):
                    w.line("invoke", process, "send", f'[["send", {key}, {value}]]')
                    w.line("ok", process, "send", f'[["send", {key}, [{offset}, {value}]]]')
            elif txn and not kind and rng.random() < TXN_SHARE:
                next_value = _transaction(w, rng, logs, positions[process], process, key,
                                          next_value)
                continue
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
        if txn:
            for number in range(INJECTIONS_PER_TYPE):
                for cycle in CYCLES:
                    next_value = _cycle(w, cycle, f"{cycle}-{number}", processes + 2, next_value)
                    injected[cycle.split("-ww")[0]] += 1
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


def _transaction(w: Writer, rng: random.Random, logs: list[list], positions: list[int],
                 process: int, key: int, value: int) -> int:
    """One committed transaction: a send to `key` and a poll of another key from where the
    process was. Returns the next free value."""
    read = rng.randrange(len(logs))
    log = logs[read]
    start = positions[read]
    records = [(o, log[o]) for o in range(start, min(len(log), start + rng.randrange(1, 8)))
               if log[o] is not HOLE]
    if records:
        positions[read] = records[-1][0] + 1
    pairs = ", ".join(f"[{o}, {v}]" for o, v in records)
    w.line("invoke", process, "txn", f'[["send", {key}, {value}], ["poll"]]')
    logs[key].append(value)
    w.line("ok", process, "txn", f'[["send", {key}, [{len(logs[key]) - 1}, {value}]], '
                                 f'["poll", {{"{read}": [{pairs}]}}]]')
    return value + 1


def _cycle(w: Writer, kind: str, name: str, process: int, value: int) -> int:
    """Two overlapping transactions on keys of their own forming a cycle of `kind`: G0 (ww
    both ways), G1c (each reads the other's send) or G1c-ww (a read one way, a ww the
    other). Returns the next free value."""
    x, y, a, b, c = f'"{name}-x"', f'"{name}-y"', value, value + 1, value + 2
    p, q = process, process + 1
    if kind == "G0":
        w.line("invoke", p, "txn", f'[["send", {x}, {a}], ["send", {y}, {a}]]')
        w.line("invoke", q, "txn", f'[["send", {x}, {b}], ["send", {y}, {b}]]')
        w.line("ok", p, "txn", f'[["send", {x}, [0, {a}]], ["send", {y}, [1, {a}]]]')
        w.line("ok", q, "txn", f'[["send", {x}, [1, {b}]], ["send", {y}, [0, {b}]]]')
        reads = f'{{{x}: [[0, {a}], [1, {b}]], {y}: [[0, {b}], [1, {a}]]}}'
    elif kind == "G1c":
        w.line("invoke", p, "txn", f'[["send", {x}, {a}], ["poll"]]')
        w.line("invoke", q, "txn", f'[["send", {y}, {b}], ["poll"]]')
        w.line("ok", p, "txn", f'[["send", {x}, [0, {a}]], ["poll", {{{y}: [[0, {b}]]}}]]')
        w.line("ok", q, "txn", f'[["send", {y}, [0, {b}]], ["poll", {{{x}: [[0, {a}]]}}]]')
        reads = f'{{{x}: [[0, {a}]], {y}: [[0, {b}]]}}'
    else:
        w.line("invoke", p, "txn", f'[["send", {x}, {a}], ["send", {y}, {c}]]')
        w.line("invoke", q, "txn", f'[["poll"], ["send", {y}, {b}]]')
        w.line("ok", p, "txn", f'[["send", {x}, [0, {a}]], ["send", {y}, [2, {c}]]]')
        w.line("ok", q, "txn", f'[["poll", {{{x}: [[0, {a}]]}}], ["send", {y}, [1, {b}]]]')
        reads = f'{{{x}: [[0, {a}]], {y}: [[1, {b}], [2, {c}]]}}'
    w.line("invoke", p, "poll", '[["poll"]]')
    w.line("ok", p, "poll", f'[["poll", {reads}]]')
    return value + 3


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
    parser.add_argument("--txn", action="store_true",
                        help="add transactions, inject dependency cycles, run the txn checker")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kchaos-bench-") as scratch:
        path = Path(scratch) / "history.jsonl"
        started = time.monotonic()
        injected = generate(path, args.ops, args.keys, args.processes, args.seed, args.txn)
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
            if args.txn:
                checkers["txn"] = TxnChecker()
            timings: dict[str, float] = {}
            started = time.monotonic()
            results = check_history_on_spark(session, test, path, checkers, timings=timings)
            total = time.monotonic() - started
    print(f"loading (read, parse and validate on the driver): {timings['load']:.1f} s")
    print(f"checking (split by key, each key on the executors, then fold): "
          f"{timings['check']:.1f} s")
    print(f"loading + checking: {total:.1f} s; verdict {results.valid}")
    found = {kind: anomaly for name in ("queue", "txn") if name in results.checkers
             for kind, anomaly in results.checkers[name].anomalies.items()}
    missed = [kind for kind, count in injected.items()
              if kind not in found or found[kind].count < count]
    for kind, anomaly in sorted(found.items()):
        print(f"  {kind}: {anomaly.count} found, {injected.get(kind, 0)} injected")
    if "txn" in results.checkers:
        print(f"  txn graph: {results.checkers['txn'].stats}")
    if missed:
        print(f"MISSED: {missed}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
