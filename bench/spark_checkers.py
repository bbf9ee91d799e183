"""Benchmark: every checker Spark-parallel by key, on a 32-key history with hard keys.

    .venv/bin/python bench/spark_checkers.py [--keys 32] [--processes 12000] [--ops 1]
                                             [--no-cluster]

Generates a valid queue history in which every key is written and read by many
concurrent processes (`--processes`, each running `--ops` sends and polls one after
another, of random overlapping durations; half the sends of unknown outcome), so that
each key's linearizability search takes seconds: it grows about as the square of the
ops of a key open at once (12,000 one-op processes in 26 s: 2.8 MB and about 6 s of
search a key), while the driver's share, routing each line to its key, grows with the
lines. Checks it with
`--checker queue,acks,elections,linearizability` three ways: (a) serially in this
process, (b) on Spark local[2] and (c) on a standalone cluster of two one-core
workers (pyspark's own jars, on loopback, stopped at the end). Prints each way's
seconds (the session start apart) and those of the linearizability part, checks the
results are identical (times apart) and exits 1 if not, or if the linearizability
part is not at least 1.7 times faster on local[2] than serially.

With `--threshold`, it measures instead where `kchaos check-history` in the calling
process stops being faster than starting Spark (`checker.spark.IN_PROCESS_BYTES`).
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import Target, exit_status  # noqa: E402
from checker.history import load_history  # noqa: E402
from checker.registry import composed  # noqa: E402
from checker.spark import IN_PROCESS_BYTES, check_histories_on_spark, spark_session  # noqa: E402
from tests.support.results import without_seconds  # noqa: E402
from tests.support.spark_cluster import spark_cluster  # noqa: E402

CHECKERS = ("queue", "acks", "elections", "linearizability")
TEST = {"workload": "queue", "acks": "all",
        "broker_config": {"min.insync.replicas": 2, "unclean.leader.election.enable": False}}
TARGET = 1.7
DURATION = (1, 20)
UNKNOWN_SHARE = 0.5


def key_ops(rng: random.Random, key: int, processes: int, ops: int, value: int,
            unknown_share: float) -> tuple[list[tuple], int]:
    """One key's ops (start, end, process, f, value, result): each process runs its ops one
    after another; a send is appended at a random instant inside its interval (with its
    offset, or of unknown outcome), a poll reads the next few records from where that
    process was, as the log was then; a final poll drains the key."""
    base = key * (processes + 1)
    planned = []
    for process in range(processes):
        clock = rng.uniform(0, 5)
        for _ in range(ops):
            start = clock + rng.uniform(0, 1)
            end = start + rng.uniform(*DURATION)
            f = "send" if rng.random() < 0.6 else "poll"
            planned.append((rng.uniform(start, end), start, end, base + process, f))
            clock = end
    planned.sort()
    log: list[int] = []
    positions = dict.fromkeys(range(base, base + processes), 0)
    done = []
    for _, start, end, process, f in planned:
        if f == "send":
            value += 1
            log.append(value)
            offset = None if rng.random() < unknown_share else len(log) - 1
            done.append((start, end, process, f, value, offset))
        else:
            first = positions[process]
            last = min(len(log), first + rng.randrange(1, 4))
            positions[process] = max(first, last)
            done.append((start, end, process, f, None,
                         [[o, log[o]] for o in range(first, last)]))
    end = max(e for _, _, e, _, _ in planned)
    done.append((end + 1, end + 2, base + processes, "poll", None,
                 [[o, v] for o, v in enumerate(log)]))
    return done, value


def generate(path: Path, keys: int, processes: int, ops: int, seed: int) -> int:
    """Write the history (every key's ops interleaved by time); returns its op count."""
    rng = random.Random(seed)
    events = []
    value = 0
    for key in range(keys):
        planned, value = key_ops(rng, key, processes, ops, value, UNKNOWN_SHARE)
        for start, end, process, f, sent, result in planned:
            if f == "send":
                invoked = json.dumps([["send", key, sent]])
                completed = json.dumps([["send", key, [result, sent]]])
            else:
                invoked = '[["poll"]]'
                completed = json.dumps([["poll", {str(key): result}]])
            events.append((start, 0, process, f, invoked))
            events.append((end, 1, process, f, completed))
    events.sort(key=lambda e: (e[0], e[1]))
    with open(path, "w") as out:
        for index, (when, completes, process, f, body) in enumerate(events):
            kind = "ok" if completes else "invoke"
            out.write(f'{{"index": {index}, "time": {int(when * 1e6)}, "type": "{kind}", '
                      f'"process": {process}, "f": "{f}", "value": {body}}}\n')
    return len(events)


def serially(path: Path, opts: dict) -> tuple[float, dict]:
    started = time.monotonic()
    result = composed(CHECKERS).check(TEST, load_history(path), opts)
    return time.monotonic() - started, result.to_json()


def on_spark(master: str, path: Path, opts: dict) -> tuple[float, float, dict]:
    """Seconds to start the session, seconds to check, and the results."""
    started = time.monotonic()
    with spark_session(master, "kchaos-bench") as session:
        ready = time.monotonic()
        [result] = check_histories_on_spark(session, [(TEST, path, composed(CHECKERS), opts)])
        checked = time.monotonic()
    return ready - started, checked - ready, result.to_json()


def comparable(body: dict) -> dict:
    """The results without times, nor the linearizability search's configuration counts:
    its two searches take turns by time, so how many configurations they held when one
    decided depends on the machine's speed (the verdicts and witnesses do not)."""
    body = without_seconds(body)
    stats = body["checkers"]["linearizability"]["stats"]
    stats.pop("configurations", None)
    for part in stats.get("partition_results", []):
        part.pop("configurations", None)
    return body


def lin_seconds(body: dict) -> float:
    return body["checkers"]["linearizability"]["seconds"]


def row(name: str, seconds: float, body: dict, start: float | None = None) -> str:
    started = f"{start:6.1f}" if start is not None else "     -"
    return (f"{name:<22} {started} {seconds:8.1f} {lin_seconds(body):8.1f}   "
            f"{body['valid']!s:<6} {sum(1 for _ in body['checkers'])} checkers")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=32)
    parser.add_argument("--processes", type=int, default=12000)
    parser.add_argument("--ops", type=int, default=1, help="ops per process and key")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--no-cluster", action="store_true", help="skip the standalone cluster")
    parser.add_argument("--threshold", type=int, nargs="*", metavar="OPS",
                        help="only measure where checking in process stops being faster "
                             "than starting Spark, on histories of OPS ops per process "
                             "(default 5 10 20 40 80)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kchaos-bench-") as scratch:
        root = Path(scratch)
        if args.threshold is not None:
            threshold(root, tuple(args.threshold or (5, 10, 20, 40, 80)))
            return 0
        path = root / "history.jsonl"
        begun = time.monotonic()
        count = generate(path, args.keys, args.processes, args.ops, args.seed)
        size = path.stat().st_size
        print(f"history: {args.keys} keys, {count} ops, {size / 1e6:.1f} MB, generated in "
              f"{time.monotonic() - begun:.1f} s; checkers {','.join(CHECKERS)}")
        opts = {"store_dir": str(root)}
        print(f"{'':<22} {'start':>6} {'check s':>8} {'lin s':>8}   valid")
        serial_seconds, serial = serially(path, opts)
        print(row("(a) serial, in-process", serial_seconds, serial), flush=True)
        start, seconds, local = on_spark("local[2]", path, opts)
        print(row("(b) Spark local[2]", seconds, local, start), flush=True)
        bodies = {"local[2]": local}
        if not args.no_cluster:
            with spark_cluster(root / "cluster") as cluster:
                start, seconds, standalone = on_spark(cluster.url, path, opts)
            print(row("(c) standalone, 2 x 1", seconds, standalone, start), flush=True)
            bodies["standalone"] = standalone
        same = {name: comparable(body) == comparable(serial) for name, body in bodies.items()}
        speedup = lin_seconds(serial) / lin_seconds(local)
        print(f"identical results: {', '.join(f'{n} {ok}' for n, ok in same.items())}")
        print(f"linearizability: {speedup:.2f}x faster on local[2] than serially "
              f"(target {TARGET}x)")
    missed = exit_status(targets(speedup))
    return 0 if all(same.values()) and not missed else 1


def targets(speedup: float) -> list[Target]:
    """The target of the linearizability part's speed-up on local[2] over serial."""
    return [Target("linearizability speed-up on local[2]", speedup, TARGET, "x", at_least=True)]


def threshold(root: Path, sizes: tuple[int, ...]) -> None:
    """Seconds of `kchaos check-history` on histories of this shape (`sizes`: ops per
    process, 8 keys of 50 processes), in a fresh process each: `--local`, and on Spark
    local[*] (its start included); where the two meet is `IN_PROCESS_BYTES`."""
    print(f"{'history MB':>10} {'in-process s':>13} {'Spark local[*] s':>17}")
    for ops in sizes:
        path = root / f"threshold-{ops}.jsonl"
        generate(path, 8, 50, ops, 3)
        times = []
        for where in (["--local"], ["--spark-master", "local[*]"]):
            started = time.monotonic()
            subprocess.run([sys.executable, "-m", "harness.cli", "check-history", str(path),
                            *where], cwd=ROOT, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, check=False)
            times.append(time.monotonic() - started)
        print(f"{path.stat().st_size / 1e6:10.1f} {times[0]:13.1f} {times[1]:17.1f}", flush=True)
    print(f"IN_PROCESS_BYTES is {IN_PROCESS_BYTES / 1e6:.1f} MB")


if __name__ == "__main__":
    sys.exit(main())
