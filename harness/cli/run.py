"""`kchaos run`: a chaos test end to end. Its flags come from the options the parts declare."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import exit_codes
from harness.config import ConfigError, declaring_parts, load_config
from harness.options import add_arguments, declared
from harness.scenarios import SCENARIOS

__all__ = ["add_commands", "add_part_arguments"]


def add_commands(commands: argparse._SubParsersAction) -> None:
    run = commands.add_parser(
        "run", help="run a chaos test end to end",
        description="Bring up the system under test, run a workload under faults, heal, read "
        "everything back, check the history and write the report into the store. Exit 0 "
        "valid, 1 anomalies found, 2 unknown, 3 harness or input error. Every option can also "
        "be set in a TOML file (--config; keys as the options without dashes, tables for "
        "KEY=VALUE options); options given here win.")
    run.add_argument("--config", type=Path, metavar="FILE.toml", help="TOML file of options")
    add_part_arguments(run)
    run.set_defaults(handler=_run)


def add_part_arguments(parser: argparse.ArgumentParser) -> None:
    """A group of flags per part: the test run, where nodes run (backend), the nemesis, each
    db, each workload (an option two parts declare appears once)."""
    seen: set[str] = set()
    for title, options in declaring_parts():
        add_arguments(parser.add_argument_group(f"{title} options"), declared(options), seen)


def _run(args: argparse.Namespace) -> int:
    from harness.control.userns import ensure_root
    from harness.runner import run_test
    from harness.test import build_test

    if args.scenario == "list":
        for scenario in SCENARIOS.values():
            print(f"{scenario.name}: {scenario.description}")
        return 0
    try:
        config = load_config(args.config, vars(args))
        test = build_test(config)
    except ConfigError as error:
        print(f"kchaos run: {error}", file=sys.stderr)
        return exit_codes.ERROR
    if config.backend.backend == "local":
        ensure_root(sys.argv[1:])
    return run_test(test).exit_code
