"""The harness's own overhead for a 5-broker run: everything but the time limit.

    python bench/harness_overhead.py [--time-limit 10] [--nodes 5] [--zookeepers 3]

Runs `kchaos run` (default faults) into a temporary store and prints the wall time, the
time limit, and their difference (cluster start, the final phase's heal, recovery wait
and final reads, log collection, checking on Spark, the report, teardown), with the
parts the run itself reports. Target: at most 40 s; exits 1 when it is missed or the run
ends in an error (exit status other than 0 or 1).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.targets import Target, exit_status  # noqa: E402

KCHAOS = str(Path(sys.executable).parent / "kchaos")


def targets(overhead_seconds: float) -> list[Target]:
    """The target of the harness's overhead."""
    return [Target("harness overhead", overhead_seconds, 40)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--time-limit", type=float, default=10.0)
    parser.add_argument("--nodes", type=int, default=5)
    parser.add_argument("--zookeepers", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kchaos-bench-") as store:
        started = time.monotonic()
        done = subprocess.run([KCHAOS, "run", "--store", store, "--time-limit",
                               str(args.time_limit), "--nodes", str(args.nodes),
                               "--zookeepers", str(args.zookeepers), "--seed", "1"],
                              capture_output=True, text=True, check=False)
        wall = time.monotonic() - started
    output = done.stdout
    up = re.search(r" up in ([\d.]+) s", output)
    checked = re.search(r"checked in ([\d.]+) s", output)
    verdict = re.search(r"kchaos: (VALID|INVALID|UNKNOWN)", output)
    print(f"kchaos run, {args.nodes} brokers, {args.zookeepers} ZooKeepers, "
          f"time limit {args.time_limit:g} s: exit {done.returncode}, "
          f"{verdict.group(1) if verdict else 'no verdict'}")
    print(f"  wall time                {wall:6.1f} s")
    print(f"  harness overhead         {wall - args.time_limit:6.1f} s   (target <= 40 s)")
    if up:
        print(f"    db up                  {float(up.group(1)):6.1f} s")
    if checked:
        print(f"    checking (Spark)       {float(checked.group(1)):6.1f} s")
    if done.returncode not in (0, 1):
        print(output[-2000:], done.stderr[-2000:])
        return 1
    return exit_status(targets(wall - args.time_limit))


if __name__ == "__main__":
    sys.exit(main())
