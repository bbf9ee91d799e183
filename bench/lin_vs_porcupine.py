"""Our linearizability checker and Porcupine side by side, on the same files, in one run.

    python bench/lin_vs_porcupine.py [--timeout S] [--sizes 1000,5000] [--only TEXT] [--seed N]

Cases: generated cas-register histories (tests/support/cas_histories.py) of
1000 and 5000 ops, N in {5, 20} processes, D in {5, 1000} values, a fraction
q in {0, 0.02} of writes and cas of unknown outcome, each valid by
construction and as its invalid twin (32 cases); then Porcupine's own etcd
logs and kv histories (tests/data/porcupine), each set timed as a whole.

Porcupine runs in bench/porcupine, a small Go program of ours (its models and
parsers are ours; go.mod requires github.com/anishathalye/porcupine v1.3.1,
fetched through the Go module proxy when it is built). Both sides time the
check only, in process, with `--timeout` seconds each (ours as its budget).

Targets: on generated cases ours takes at most max(2 x Porcupine, 0.5 s) and
is never unknown where Porcupine decides; on Porcupine's files ours is no
slower than Porcupine; every decided verdict is right. Prints a table; exits
1 when a target is missed, 2 when Go is missing.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from checker.history import write_jsonl  # noqa: E402
from checker.lin.files import load_job  # noqa: E402
from checker.lin.models import MODELS  # noqa: E402
from checker.lin.search import Budget, check_partition  # noqa: E402
from tests.support.cas_histories import cas_history, invalid_twin  # noqa: E402

GO_PROGRAM = ROOT / "bench" / "porcupine"
PORCUPINE_DATA = ROOT / "tests" / "data" / "porcupine"
GO_MISSING = """\
lin_vs_porcupine: `go` not found (looked on PATH and in /usr/local/go/bin).
Install Go 1.21 or newer from https://go.dev/dl/ (this bench is run with 1.26), e.g.
    sudo tar -C /usr/local -xzf go1.26.<patch>.linux-amd64.tar.gz
    export PATH=$PATH:/usr/local/go/bin
The first build fetches github.com/anishathalye/porcupine v1.3.1 through the Go module
proxy (GOPROXY, default https://proxy.golang.org)."""
FLOOR_SECONDS = 0.5


@dataclass
class Case:
    name: str
    files: list[Path]
    go_format: str
    expected: list[bool | None]
    generated: bool


@dataclass
class Timing:
    seconds: float
    verdicts: list[str]  # per file: valid, invalid, unknown or error

    @property
    def verdict(self) -> str:
        """The worst of the files' verdicts."""
        for worst in ("error", "invalid", "unknown"):
            if worst in self.verdicts:
                return worst
        return "valid"


def find_go() -> str | None:
    return shutil.which("go") or next(
        (str(p) for p in [Path("/usr/local/go/bin/go")] if p.exists()), None)


def build_porcupine(go: str, out: Path) -> Path:
    binary = out / "porcupine"
    subprocess.run([go, "build", "-o", str(binary), "."], cwd=GO_PROGRAM, check=True)
    return binary


def generated_cases(out: Path, sizes: list[int], seed: int) -> list[Case]:
    cases = []
    for ops in sizes:
        for processes in (5, 20):
            for values in (5, 1000):
                for unknown in (0.0, 0.02):
                    valid = cas_history(ops, processes, values, unknown, seed=seed)
                    for label, history in (("valid", valid),
                                           ("invalid", invalid_twin(valid, values))):
                        name = f"cas n={ops} N={processes} D={values} q={unknown:g} {label}"
                        path = out / (name.replace(" ", "_").replace("=", "") + ".jsonl")
                        write_jsonl(history, path)
                        cases.append(Case(name, [path], "jsonl", [label == "valid"], True))
    return cases


def porcupine_cases() -> list[Case]:
    """Porcupine's etcd logs and kv histories, each set one case (the empty log left out)."""
    with open(PORCUPINE_DATA / "expected_verdicts.csv", newline="") as handle:
        expected = {row["file"]: {"true": True, "false": False}.get(row["expected_linearizable"])
                    for row in csv.DictReader(handle)}
    cases = []
    for folder, go_format in (("jepsen", "etcd"), ("kv", "kv")):
        names = sorted(name for name, verdict in expected.items()
                       if name.startswith(folder + "/") and verdict is not None)
        cases.append(Case(f"porcupine {folder} ({len(names)} files)",
                          [PORCUPINE_DATA / n for n in names], go_format,
                          [expected[n] for n in names], False))
    return cases


def run_ours(case: Case, timeout: float) -> Timing:
    """Load apart, then time the check of every partition of every file."""
    seconds, verdicts = 0.0, []
    model = "cas-register" if case.generated else "auto"
    for path in case.files:
        job = load_job(str(path), model=model)
        if job.error:
            verdicts.append("error")
            continue
        file_verdict: object = True
        for key, ops in job.partitions:
            started = time.perf_counter()
            result = check_partition(MODELS[job.model], ops, key=key,
                                     budget=Budget(seconds=timeout))
            seconds += time.perf_counter() - started
            if result.valid is not True:
                file_verdict = result.valid
                if result.valid is False:
                    break
        verdicts.append(_name(file_verdict))
    return Timing(seconds, verdicts)


def run_porcupine(binary: Path, case: Case, timeout: float) -> Timing:
    done = subprocess.run([str(binary), "-format", case.go_format, "-timeout", str(timeout),
                           *map(str, case.files)], capture_output=True, text=True, check=False)
    results = [json.loads(line) for line in done.stdout.splitlines()]
    if done.returncode or len(results) != len(case.files):
        print(done.stderr, file=sys.stderr)
        return Timing(0.0, ["error"])
    return Timing(sum(r["seconds"] for r in results), [r["verdict"] for r in results])


def verdicts_right(timing: Timing, case: Case) -> bool:
    """Every file's verdict is the expected one, or unknown."""
    return len(timing.verdicts) == len(case.expected) and all(
        verdict in (_name(expected), "unknown")
        for verdict, expected in zip(timing.verdicts, case.expected, strict=True))


def judge(case: Case, ours: Timing, go: Timing) -> tuple[bool, str]:
    """Whether the targets are met, and what missed them."""
    misses = []
    if not verdicts_right(ours, case):
        misses.append("our verdict is wrong")
    if not verdicts_right(go, case):
        misses.append("Porcupine's verdict is wrong or missing")
    if case.generated:
        if ours.verdict == "unknown" and go.verdict in ("valid", "invalid"):
            misses.append("unknown where Porcupine decides")
        if ours.seconds > max(2 * go.seconds, FLOOR_SECONDS) and go.verdict != "unknown":
            misses.append("slower than max(2 x Porcupine, 0.5 s)")
    else:
        if "unknown" in ours.verdicts:
            misses.append("unknown on a file")
        if ours.seconds > go.seconds:
            misses.append("slower than Porcupine")
    return not misses, "; ".join(misses)


def _name(verdict: object) -> str:
    return {True: "valid", False: "invalid"}.get(verdict, "unknown")  # type: ignore[call-overload]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds per file, each side (default %(default)s)")
    parser.add_argument("--sizes", default="1000,5000", help="ops per generated history")
    parser.add_argument("--only", default="", help="run only the cases whose name contains this")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    go = find_go()
    if go is None:
        print(GO_MISSING, file=sys.stderr)
        return 2
    os.environ["PATH"] = f"{os.environ.get('PATH', '')}{os.pathsep}{Path(go).parent}"
    with tempfile.TemporaryDirectory(prefix="kchaos-lin-vs-porcupine-") as scratch:
        out = Path(scratch)
        binary = build_porcupine(go, out)
        sizes = [int(size) for size in args.sizes.split(",")]
        cases = [c for c in generated_cases(out, sizes, args.seed) + porcupine_cases()
                 if args.only in c.name]
        row = "{:<38} {:>9} {:>11} {:>9} {:>11} {:>8}  {}"
        print(row.format("case", "ours s", "ours", "Go s", "Porcupine", "ratio", "target"))
        missed = 0
        for case in cases:
            ours = run_ours(case, args.timeout)
            theirs = run_porcupine(binary, case, args.timeout)
            met, why = judge(case, ours, theirs)
            missed += not met
            ratio = ours.seconds / theirs.seconds if theirs.seconds else float("inf")
            print(row.format(case.name, f"{ours.seconds:.3f}", ours.verdict,
                             f"{theirs.seconds:.3f}", theirs.verdict, f"{ratio:.2f}",
                             "met" if met else f"MISSED: {why}"), flush=True)
    print(f"\n{len(cases) - missed} of {len(cases)} cases meet their targets")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
