"""The same chaos tests on our broker and on Apache Kafka: verdicts, lost writes, their
attribution and availability, side by side.

Each case is one `kchaos run` per db with the same seed, options and fault schedule (as
root, in network namespaces); the runs are stored under `--store` (default
`store/side-by-side`). Cases:

- `safe`: the defaults (acks=all, min.insync.replicas=2, unclean election off), 60 s of
  every nemesis (`--nemesis all`), one run per seed of `--seeds`;
- `unclean`: `--scenario unclean-2013` (Kafka's 2013 loss, staged);
- `acks1`: `--acks 1` with leader kills;
- `acks1-isolated`: `--acks 1`, the leader cut off from its followers, then killed.

Per run it prints the verdict headline, acknowledged writes lost, the elections
checker's attribution (unclean-election-loss, ...), the share of seconds without an ok
write and the median failover.

    .venv/bin/python bench/dbs_side_by_side.py [--cases safe,unclean,acks1] [--seeds 1,2,3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from reports.summary import headline  # noqa: E402

KCHAOS = str(Path(sys.executable).parent / "kchaos")
CASES = {
    "safe": ["--nemesis", "all", "--time-limit", "60"],
    "unclean": ["--scenario", "unclean-2013"],
    "acks1": ["--acks", "1", "--nemesis", "kill-leader", "--nemesis-interval", "8",
              "--time-limit", "60"],
    "acks1-isolated": ["--acks", "1", "--nemesis", "leader-from-followers,kill-leader",
                       "--nemesis-interval", "4", "--time-limit", "60"],
}


def run(db: str, case: str, seed: int, store: Path) -> dict:
    name = f"{case}-{db}-{seed}"
    done = subprocess.run([KCHAOS, "run", "--db", db, "--name", name, "--seed", str(seed),
                           "--store", str(store), *CASES[case]],
                          capture_output=True, text=True, timeout=1200)
    results_file = store / name / "latest" / "results.json"
    if not results_file.exists():
        return {"db": db, "case": case, "seed": seed, "exit": done.returncode,
                "headline": f"no results (exit {done.returncode}): "
                            f"{(done.stderr.strip().splitlines() or ['?'])[-1]}"}
    results = json.loads(results_file.read_text())
    checkers = results.get("checkers", {})
    elections = checkers.get("elections", {})
    availability = checkers.get("availability", {}).get("stats", {})
    failovers = [f["seconds"] for f in availability.get("failovers", [])
                 if f.get("seconds") is not None]
    return {
        "db": db, "case": case, "seed": seed, "exit": done.returncode,
        "headline": headline(results),
        "acked_lost": (elections.get("stats") or {}).get("lost-acknowledged"),
        "attribution": {kind: body.get("count") for kind, body in
                        (elections.get("anomalies") or {}).items()},
        "without_ok_write": (availability.get("overall") or {}).get("fraction"),
        "failover_median_s": statistics.median(failovers) if failovers else None,
        "elections": len(failovers),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", default="safe,unclean,acks1")
    parser.add_argument("--dbs", default="kchaos,kafka")
    parser.add_argument("--seeds", default="1,2,3", help="seeds of the safe case")
    parser.add_argument("--store", type=Path, default=Path("store/side-by-side"))
    args = parser.parse_args()
    cases = args.cases.split(",")
    unknown = [case for case in cases if case not in CASES]
    if unknown:
        parser.error(f"--cases: unknown {', '.join(unknown)}; known: {', '.join(CASES)}")
    seeds = [int(seed) for seed in args.seeds.split(",")]
    rows = []
    for case in cases:
        for seed in seeds if case == "safe" else seeds[:1]:
            for db in args.dbs.split(","):
                row = run(db, case, seed, args.store)
                rows.append(row)
                print(json.dumps(row), flush=True)
    print(f"\n{'case':<8} {'seed':>4} {'db':<7} {'lost':>5} {'no-write':>8} "
          f"{'failover':>8}  verdict")
    for row in rows:
        fraction = row.get("without_ok_write")
        failover = row.get("failover_median_s")
        print(f"{row['case']:<8} {row['seed']:>4} {row['db']:<7} "
              f"{row.get('acked_lost') if row.get('acked_lost') is not None else '-':>5} "
              f"{f'{fraction:.0%}' if fraction is not None else '-':>8} "
              f"{f'{failover:.1f} s' if failover is not None else '-':>8}  {row['headline']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
