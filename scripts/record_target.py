"""Run a make target and record its result as a row of docs/results/targets.md.

    .venv/bin/python scripts/record_target.py test-long [test-clients ...]

For the targets `make test` leaves out (the Docker image tests, the Kafka side of the
transaction and group storylines, Vagrant): each row says when the target last ran
(UTC), on which commit and machine, whether it passed, how long it took and pytest's
counts. The output streams through and is kept in build/targets/<target>.log. A row is
replaced when its target runs again; the page's other text is written by this script
too. Exit: the target's own exit code (the first non-zero of several targets).
"""

from __future__ import annotations

import argparse
import datetime
import re
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path

from harness import provenance
from reports.figures import describe_machine, describe_source

ROOT = Path(__file__).resolve().parent.parent

PAGE = ROOT / "docs" / "results" / "targets.md"
LOGS = ROOT / "build" / "targets"
BEGIN, END = "<!-- rows: begin -->", "<!-- rows: end -->"
HEADER = "| target | date (UTC) | commit | machine | result | duration | tests |"
SUMMARY = re.compile(r"^=*\s*((?:\d+ [a-z]+(?:, )?)+) in [\d.]+s")
COUNT = re.compile(r"(\d+) ([a-z]+)")
ORDER = ("passed", "failed", "error", "errors", "skipped", "xfailed", "xpassed", "deselected")

INTRO = """# Make targets outside `make test`

<!-- Written by scripts/record_target.py; edits are overwritten. -->

`make test` leaves out four targets that take too long for it: the long runs and long
variants (`make test-long`), the same tests with each further client library and against
Apache Kafka as the reference (`make test-clients`: the Kafka side of the transaction and
group storylines among them), the Docker image tests (`make test-docker`) and the chaos
test on VMs (`make test-vagrant`). Each row is the last result of a target, written by

```
nice -n 10 .venv/bin/python scripts/record_target.py TARGET [TARGET ...]
make record-targets      # the four
```

which runs `make TARGET` and replaces that target's row (its output is kept in
`build/targets/TARGET.log`). Nothing here is typed by hand.

"""


def test_counts(lines: Iterable[str]) -> dict[str, int]:
    """pytest's summary counts ("3 passed, 1 skipped in 2.1s"), summed over every
    summary line of the output."""
    counts: dict[str, int] = {}
    for line in lines:
        found = SUMMARY.match(line.strip())
        if found:
            for number, kind in COUNT.findall(found.group(1)):
                kind = "errors" if kind == "error" else kind
                counts[kind] = counts.get(kind, 0) + int(number)
    return counts


def describe_counts(counts: dict[str, int]) -> str:
    if not counts:
        return "no pytest summary"
    ordered = sorted(counts.items(), key=lambda item: ORDER.index(item[0])
                     if item[0] in ORDER else len(ORDER))
    return ", ".join(f"{number} {kind}" for kind, number in ordered)


def describe_duration(seconds: float) -> str:
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest} s" if minutes else f"{rest} s"


def row(target: str, when: datetime.datetime, exit_code: int, seconds: float,
        counts: dict[str, int], machine: dict, source: dict) -> str:
    passed = exit_code == 0 and not counts.get("failed") and not counts.get("errors")
    result = "passed" if passed else f"**FAILED** (exit {exit_code})"
    cells = [f"`make {target}`", when.strftime("%Y-%m-%d %H:%M"), describe_source(source),
             describe_machine(machine), result, describe_duration(seconds),
             describe_counts(counts)]
    return "| " + " | ".join(cells) + " |"


def rows_of(page: str) -> dict[str, str]:
    """target -> its row, from a page this script wrote."""
    if BEGIN not in page or END not in page:
        return {}
    body = page[page.index(BEGIN) + len(BEGIN):page.index(END)]
    found = {}
    for line in body.splitlines():
        key = re.match(r"^\| `make ([^`]+)` \|", line)
        if key:
            found[key.group(1)] = line
    return found


def update_page(page: Path, target: str, new_row: str) -> None:
    rows = rows_of(page.read_text(encoding="utf-8")) if page.is_file() else {}
    rows[target] = new_row
    table = [HEADER, "|" + "---|" * HEADER.count(" | ") + "---|"]
    table += [rows[name] for name in sorted(rows)]
    page.parent.mkdir(parents=True, exist_ok=True)
    page.write_text(INTRO + BEGIN + "\n" + "\n".join(table) + "\n" + END + "\n",
                    encoding="utf-8")


def run_target(target: str, make: Sequence[str], log: Path) -> tuple[int, float, list[str]]:
    """`make TARGET` from the repository's root, its output streamed to this process's
    and to `log`: (exit code, seconds, output lines)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    lines: list[str] = []
    start = time.monotonic()
    with open(log, "w", encoding="utf-8") as kept, subprocess.Popen(
            [*make, target], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True, errors="replace") as child:
        assert child.stdout is not None
        for line in child.stdout:
            sys.stdout.write(line)
            sys.stdout.flush()
            kept.write(line)
            lines.append(line)
    return child.returncode, time.monotonic() - start, lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("targets", nargs="+", metavar="TARGET", help="make targets")
    parser.add_argument("--page", type=Path, default=PAGE,
                        help="the page of rows (default %(default)s)")
    parser.add_argument("--make", default="make", help="the make command (default make)")
    parser.add_argument("--logs", type=Path, default=LOGS,
                        help="where each target's output is kept (default %(default)s)")
    args = parser.parse_args(argv)
    worst = 0
    for target in args.targets:
        when = datetime.datetime.now(datetime.UTC)
        source = provenance.source()
        exit_code, seconds, lines = run_target(target, args.make.split(),
                                               args.logs / f"{target}.log")
        new_row = row(target, when, exit_code, seconds, test_counts(lines),
                      provenance.machine(), source)
        update_page(args.page, target, new_row)
        print(f"record_target: {new_row}\nrecord_target: wrote {args.page}", flush=True)
        worst = worst or exit_code
    return worst


if __name__ == "__main__":
    sys.exit(main())
