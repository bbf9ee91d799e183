"""Benchmark: a night of runs, several queue histories checked in one process or in one Spark job.

    .venv/bin/python bench/spark_many_histories.py [--histories 8] [--ops 100000] [--keys 8]
                                                   [--no-cluster]

Generates synthetic queue histories (`bench/queue_checker.py`'s generator, anomalies
injected) and prints seconds for: each history loaded and checked one after another in
this process (the queue analysis once, then the queue, acks and election checkers);
all of them in one Spark job (`checker.spark.check_histories_on_spark`) on local[2];
and the same job on a Spark standalone cluster of two one-core workers on loopback
(`tests/support/spark_cluster.py`). Each job prints its cores, the seconds the driver
spent reading and validating the histories, and those of the checking, their keys on the
executors. Spark and cluster start-up are reported apart. Exits 1 unless every way gives the
same verdicts and anomaly counts.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "bench")]

from queue_checker import generate  # noqa: E402

from checker.cluster.elections import ElectionChecker  # noqa: E402
from checker.core import Result, compose  # noqa: E402
from checker.history import load_history  # noqa: E402
from checker.queue.acks import AcksChecker  # noqa: E402
from checker.queue.analysis import QueueChecker  # noqa: E402
from checker.spark import check_histories_on_spark, spark_session  # noqa: E402

TEST = {"acks": "all", "broker_config": {"min.insync.replicas": 2}, "start_wall_ms": 0}


def checkers() -> dict:
    return {"queue": QueueChecker(), "acks": AcksChecker(), "elections": ElectionChecker()}


def findings(results: list[Result]) -> list[tuple]:
    """Per history: the verdict and each checker's anomaly counts."""
    return [(r.valid, {name: {kind: a.count for kind, a in c.anomalies.items()}
                       for name, c in r.checkers.items()}) for r in results]


def one_job(master: str, paths: list[Path]
            ) -> tuple[float, dict[str, float], list[Result], str]:
    """(session start seconds, job timings, results, mode) of all histories in one Spark
    job."""
    started = time.monotonic()
    with spark_session(master, app_name="kchaos-bench") as session:
        ready = time.monotonic() - started
        mode = f"{session.sparkContext.defaultParallelism} cores"
        timings: dict[str, float] = {}
        begun = time.monotonic()
        results = check_histories_on_spark(session, [(TEST, p, checkers(), None) for p in paths],
                                           timings=timings)
        timings["job"] = time.monotonic() - begun
        return ready, timings, results, mode


def describe(timings: dict[str, float], alone: float, mode: str) -> str:
    return (f"{timings['job']:.1f} s (x{alone / timings['job']:.2f}; {mode}: read and "
            f"validate {timings['load']:.1f} s, per-key analysis and checkers "
            f"{timings['check']:.1f} s)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--histories", type=int, default=8)
    parser.add_argument("--ops", type=int, default=100_000)
    parser.add_argument("--keys", type=int, default=8)
    parser.add_argument("--processes", type=int, default=20)
    parser.add_argument("--no-cluster", action="store_true",
                        help="skip the standalone cluster (local[2] only)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="kchaos-bench-") as scratch:
        paths = [Path(scratch) / f"history-{n}.jsonl" for n in range(args.histories)]
        started = time.monotonic()
        for seed, path in enumerate(paths):
            generate(path, args.ops, args.keys, args.processes, seed)
        size = sum(p.stat().st_size for p in paths) / 1e6
        print(f"generation: {time.monotonic() - started:.1f} s ({args.histories} histories x "
              f"{args.ops} ops, {size:.0f} MB)", flush=True)

        started = time.monotonic()
        sequential = [compose(checkers()).check(TEST, load_history(p), {}) for p in paths]
        alone = time.monotonic() - started
        print(f"one after another in this process: {alone:.1f} s", flush=True)

        ready, timings, local, mode = one_job("local[2]", paths)
        print(f"one Spark job on local[2]: {describe(timings, alone, mode)}; "
              f"Spark start {ready:.1f} s", flush=True)
        found = {"local[2]": local}
        if not args.no_cluster:
            from tests.support.spark_cluster import spark_cluster

            with spark_cluster(Path(scratch) / "cluster") as cluster:
                ready, timings, standalone, mode = one_job(cluster.url, paths)
            print(f"one Spark job on a standalone cluster (2 workers x 1 core): "
                  f"{describe(timings, alone, mode)}; cluster start "
                  f"{cluster.start_seconds:.1f} s, "
                  f"session start {ready:.1f} s (this process's JVM already up)", flush=True)
            found["standalone"] = standalone
    differ = [name for name, results in found.items()
              if findings(results) != findings(sequential)]
    if differ:
        print(f"DIFFERENT FINDINGS: {differ}")
        return 1
    print(f"same findings every way: {[valid for valid, _ in findings(sequential)]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
