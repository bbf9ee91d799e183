"""The `kchaos` command line: one module per command family, each adding its subcommands.

    run      kchaos run (a chaos test end to end)
    check    kchaos check, check-history, check-lin (checking stored runs and bare files)
    cluster  kchaos cluster up | status | down
    report   kchaos report
    serve    kchaos serve
    history  kchaos history export
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import NoReturn

from harness import exit_codes
from harness.cli import check, cluster, history, report, run, serve

__all__ = ["build_parser", "main"]


class _Parser(argparse.ArgumentParser):
    """Usage errors are input errors: exit 3, as every command documents."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(exit_codes.ERROR, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="kchaos", description="Chaos testing for Kafka-style replicated logs.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for module in (run, check, cluster, report, serve, history):
        module.add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.handler(args)
