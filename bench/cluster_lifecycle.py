"""Seconds for `cluster up` (5 brokers, 3 ZooKeepers, healthy) and `cluster down`.

Usage: sudo .venv/bin/python bench/cluster_lifecycle.py [--rounds 3] [--brokers 5]
[--zookeepers 3]. Targets: up <= 10 s, down <= 3 s (the median round of each); exits 1
when one is missed.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.targets import Target, exit_status  # noqa: E402
from harness.db import Cluster, ClusterSpec  # noqa: E402


def targets(ups: list[float], downs: list[float]) -> list[Target]:
    """The targets of the median `cluster up` and `cluster down`."""
    return [Target("cluster up, median round", statistics.median(ups), 10),
            Target("cluster down, median round", statistics.median(downs), 3)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--brokers", type=int, default=5)
    parser.add_argument("--zookeepers", type=int, default=3)
    args = parser.parse_args()
    ups, downs = [], []
    for round_number in range(1, args.rounds + 1):
        started = time.monotonic()
        cluster = Cluster.up(ClusterSpec(brokers=args.brokers, zookeepers=args.zookeepers))
        ups.append(time.monotonic() - started)
        started = time.monotonic()
        cluster.down()
        downs.append(time.monotonic() - started)
        print(f"round {round_number}: up {ups[-1]:.2f} s, down {downs[-1]:.2f} s", flush=True)
    print(f"cluster up   ({args.brokers} brokers, {args.zookeepers} ZooKeepers, healthy): "
          f"median {statistics.median(ups):.2f} s, max {max(ups):.2f} s (target <= 10 s)")
    print(f"cluster down: median {statistics.median(downs):.2f} s, max {max(downs):.2f} s "
          "(target <= 3 s)")
    return exit_status(targets(ups, downs))


if __name__ == "__main__":
    sys.exit(main())
