"""Time the linearizability checker on the public Porcupine histories and check every verdict.

    python bench/linearizability.py [--data DIR] [--repeat N] [--no-spark] [--verdicts-only]

Prints a table per file (expected and actual verdict, seconds), then the
figures the targets speak of: the 102 etcd files together and c50-ok in one
process (best of --repeat), c50-bad decided for every key (`--complete`) with
its peak memory (measured in a child process), and the whole set in
`--complete` mode through Spark (local[*]), start-up apart. Exits 1 when a
verdict is wrong or a target is missed.
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.targets import Target, exit_status  # noqa: E402
from checker.lin.files import check_files  # noqa: E402

DATA = ROOT / "tests" / "data" / "porcupine"


def expected_verdicts(data: Path) -> dict[str, bool | None]:
    """File -> expected verdict; None where the CSV says the file is no history (an input error)."""
    with open(data / "expected_verdicts.csv", newline="") as handle:
        return {row["file"]: {"true": True, "false": False}.get(row["expected_linearizable"])
                for row in csv.DictReader(handle)}


def best_of(repeat: int, paths: list[str], complete: bool = False) -> tuple[float, list]:
    best, results = float("inf"), []
    for _ in range(repeat):
        started = time.perf_counter()
        results = check_files(paths, complete=complete)
        best = min(best, time.perf_counter() - started)
    return best, results


def targets(etcd_seconds: float, c50_ok_seconds: float, bad_seconds: float, bad_peak_mb: float,
            bad_unknown: int, complete_seconds: float,
            spark_seconds: float | None = None) -> list[Target]:
    """The targets of these figures; Spark's only when it ran (`spark_seconds`)."""
    found = [Target("etcd files together", etcd_seconds, 1.1),
             Target("c50-ok", c50_ok_seconds, 0.35),
             Target("c50-bad --complete", bad_seconds, 60),
             Target("c50-bad --complete peak memory", bad_peak_mb, 2048, "MB"),
             Target("c50-bad --complete keys unknown", bad_unknown, 0, "keys")]
    if spark_seconds is not None:
        found.append(Target("whole set --complete on Spark", spark_seconds, 2 * complete_seconds))
    return found


def complete_in_child(path: Path) -> tuple[float, float, int, str]:
    """Seconds, peak RSS in MB, keys left unknown and verdict of `check-lin --local
    --complete` on one file."""
    with tempfile.NamedTemporaryFile(suffix=".json") as out:
        started = time.perf_counter()
        subprocess.run([sys.executable, "-m", "harness.cli", "check-lin", "--local", "--complete",
                        "--json", out.name, str(path)], cwd=ROOT, stdout=subprocess.DEVNULL,
                       check=False)
        seconds = time.perf_counter() - started
        peak_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
        report = json.loads(Path(out.name).read_text())["files"][0]
    verdicts = [p["valid"] for p in report["partition_results"]]
    undecided = sum(1 for v in verdicts if v == "unknown")
    summary = f"{len(verdicts)} keys decided, {undecided} unknown, valid={report['valid']}"
    return seconds, peak_mb, undecided, summary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--no-spark", action="store_true")
    parser.add_argument("--verdicts-only", action="store_true",
                        help="print the verdict table and stop (what `make run` shows)")
    args = parser.parse_args()

    expected = expected_verdicts(args.data)
    paths = [str(args.data / name) for name in sorted(expected)]
    results = check_files(paths)
    wrong = 0
    print(f"{'file':<22} {'ops':>5} {'expected':>9} {'verdict':>9} {'seconds':>8}")
    for name, result in zip(sorted(expected), results, strict=True):
        errored_as_expected = (result.error is None) == (expected[name] is not None)
        right = result.valid == expected[name] and errored_as_expected
        wrong += not right
        shown = "error" if result.error else str(result.valid).lower()
        flag = "" if right else "   <-- WRONG"
        print(f"{name:<22} {result.ops:>5} {str(expected[name]).lower():>9} {shown:>9} "
              f"{result.seconds:>8.4f}{flag}")
    print(f"\nverdicts right: {len(expected) - wrong} of {len(expected)}")
    if args.verdicts_only:
        return 1 if wrong else 0

    etcd = [p for p in paths if "/jepsen/" in p and not p.endswith("etcd_095.log")]
    etcd_seconds, _ = best_of(args.repeat, etcd)
    c50_ok_seconds, _ = best_of(args.repeat, [str(args.data / "kv" / "c50-ok.txt")])
    bad_seconds, bad_peak, bad_unknown, bad_verdict = complete_in_child(
        args.data / "kv" / "c50-bad.txt")
    complete_seconds, _ = best_of(1, paths, complete=True)

    print(f"\nsingle process (best of {args.repeat})")
    print(f"  {len(etcd)} etcd files together     {etcd_seconds:8.3f} s   (target <= 1.1 s)")
    print(f"  c50-ok                         {c50_ok_seconds:8.3f} s   (target <= 0.35 s)")
    print(f"  c50-bad --complete (own proc)  {bad_seconds:8.3f} s   peak {bad_peak:.0f} MB   "
          f"{bad_verdict}   (target <= 60 s, <= 2048 MB, no unknown)")
    print(f"  whole set --complete           {complete_seconds:8.3f} s")

    spark_seconds = None
    if not args.no_spark:
        from checker.spark import check_files_on_spark, spark_session

        started = time.perf_counter()
        with spark_session() as session:
            startup = time.perf_counter() - started
            check_files_on_spark(session, paths[:4], complete=True)
            spark_started = time.perf_counter()
            spark_results = check_files_on_spark(session, paths, complete=True)
            spark_seconds = time.perf_counter() - spark_started
        spark_wrong = sum(
            1 for name, r in zip(sorted(expected), spark_results, strict=True)
            if r.valid != expected[name]
        )
        print("\nSpark local[*]")
        print(f"  session start-up               {startup:8.3f} s")
        print(f"  whole set --complete           {spark_seconds:8.3f} s   "
              f"(target <= 2 x {complete_seconds:.3f} = {2 * complete_seconds:.3f} s)   "
              f"verdicts wrong: {spark_wrong}")
        wrong += spark_wrong
    missed = exit_status(targets(etcd_seconds, c50_ok_seconds, bad_seconds, bad_peak, bad_unknown,
                                 complete_seconds, spark_seconds))
    return 1 if wrong or missed else 0


if __name__ == "__main__":
    sys.exit(main())
