"""`kchaos history export`: a history (JSONL or EDN) as Jepsen's EDN."""

from __future__ import annotations

import argparse
import sys

from checker.history.errors import HistoryError
from checker.lin.files import FORMAT_NAMES
from harness import exit_codes

__all__ = ["add_commands"]


def add_commands(commands: argparse._SubParsersAction) -> None:
    history = commands.add_parser("history", help="history utilities")
    history_commands = history.add_subparsers(dest="history_command", required=True,
                                              parser_class=type(history))
    export = history_commands.add_parser("export", help="convert a history to Jepsen's EDN")
    export.add_argument("history", metavar="HISTORY")
    export.add_argument("--format", choices=FORMAT_NAMES, default="auto")
    export.add_argument("--edn", metavar="FILE", required=True, help="output file, - for stdout")
    export.set_defaults(handler=_export_history)


def _export_history(args: argparse.Namespace) -> int:
    from checker.history import write_edn
    from checker.history.formats import read_ops

    try:
        ops = read_ops(args.history, args.format)
    except (HistoryError, OSError) as error:
        print(f"kchaos: {error}", file=sys.stderr)
        return exit_codes.ERROR
    if args.edn == "-":
        write_edn(ops, sys.stdout)
    else:
        with open(args.edn, "w", encoding="utf-8") as out:
            write_edn(ops, out)
        print(f"wrote {len(ops)} ops to {args.edn}", file=sys.stderr)
    return 0
