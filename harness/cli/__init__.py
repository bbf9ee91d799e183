"""The `kchaos` command line: one module per command family, each adding its subcommands.

    run        kchaos run (a chaos test end to end)
    check      kchaos check, check-history (checking stored runs and bare queue histories)
    check_lin  kchaos check-lin (linearizability of history files)
    cluster    kchaos cluster up | status | down
    report     kchaos report
    serve      kchaos serve
    history    kchaos history export
    replay     kchaos replay, shrink (a stored run's fault schedule, run again or cut down)
    nightly    kchaos nightly (a night of runs from a plan), nightly-report (its figures)

A command's module is imported only when that command runs (`kchaos check-lin
--local` must not pay for Spark, Kafka clients or plotting); `kchaos --help`,
a usage error and `build_parser()` without a command import them all.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from harness import exit_codes

__all__ = ["build_parser", "main"]

# Command -> the module of harness.cli that adds it, in the order of `kchaos --help`.
COMMANDS = {
    "run": "run",
    "check": "check",
    "check-history": "check",
    "check-lin": "check_lin",
    "cluster": "cluster",
    "report": "report",
    "serve": "serve",
    "history": "history",
    "replay": "replay",
    "shrink": "replay",
    "nightly": "nightly",
    "nightly-report": "nightly",
}


class _Parser(argparse.ArgumentParser):
    """Usage errors are input errors: exit 3, as every command documents. An unknown flag
    is reported by the (sub)command it was given to, with that command's usage."""

    def parse_known_args(self, args: Sequence[str] | None = None,
                         namespace: argparse.Namespace | None = None
                         ) -> tuple[argparse.Namespace, list[str]]:
        parsed, extras = super().parse_known_args(args, namespace)
        if extras:
            self.error(f"unrecognized arguments: {' '.join(extras)}")
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(exit_codes.ERROR, f"{self.prog}: error: {message}\n")


def build_parser(command: str | None = None) -> argparse.ArgumentParser:
    """The parser of `command` alone (a name of COMMANDS), or of every command."""
    parser = _Parser(prog="kchaos", description="Chaos testing for Kafka-style replicated logs.")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    wanted = [COMMANDS[command]] if command in COMMANDS else COMMANDS.values()
    for module in dict.fromkeys(wanted):
        importlib.import_module(f"harness.cli.{module}").add_commands(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_command_of(argv)).parse_args(argv)
    return args.handler(args)


def _command_of(argv: Sequence[str]) -> str | None:
    """The command named by `argv`: its first word, when no option comes before it."""
    return argv[0] if argv and not argv[0].startswith("-") else None
