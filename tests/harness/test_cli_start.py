"""`kchaos check-lin --local` stays light: the command line imports only the invoked command."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from harness.cli import COMMANDS, build_parser

ROOT = Path(__file__).resolve().parent.parent.parent
HISTORY = ROOT / "tests" / "data" / "porcupine" / "kv" / "c01-ok.txt"
HEAVY = ("pyspark", "kafka", "confluent_kafka", "matplotlib", "harness.config")

# Runs the command in a fresh interpreter, then prints the heavy modules it loaded.
_PROBE = """
import json, sys
from harness.cli import main
code = main(sys.argv[1:])
loaded = sorted(name for name in sys.modules
                if any(name == m or name.startswith(m + ".") for m in {heavy!r}))
print(json.dumps({{"exit": code, "loaded": loaded}}))
"""


def test_check_lin_local_loads_no_spark_kafka_plotting_or_configuration():
    probe = _PROBE.format(heavy=HEAVY)
    done = subprocess.run([sys.executable, "-c", probe, "check-lin", "--local", str(HISTORY)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=True)
    *table, last = done.stdout.splitlines()
    report = json.loads(last)
    assert report == {"exit": 0, "loaded": []}
    assert any("c01-ok.txt" in line and "valid" in line for line in table)


def test_help_lists_every_command():
    listing = build_parser().format_help()
    for command in COMMANDS:
        assert command in listing


def test_a_command_parser_holds_only_its_own_module_commands():
    parser = build_parser("check-lin")
    args = parser.parse_args(["check-lin", "--local", "a.txt"])
    assert (args.command, args.local, args.files) == ("check-lin", True, ["a.txt"])
    choices = parser._subparsers._group_actions[0].choices
    assert set(choices) == {"check-lin"}
