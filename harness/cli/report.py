"""`kchaos report STORE_DIR`: report.html, timeline.html and plots of a stored run."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import exit_codes
from harness.store import RUN_FOLDER, index_store, resolve_run, run_files
from reports.report import state_label, write_report

__all__ = ["add_commands"]


def add_commands(commands: argparse._SubParsersAction) -> None:
    report = commands.add_parser(
        "report", help="write report.html, timeline.html and plots of a stored run",
        description="Render the HTML report of a run folder (store/<test>/<time>/; a store or "
        "test folder means its `latest` run) and regenerate the store's index.html.")
    report.add_argument("store_dir", metavar="STORE_DIR", type=Path)
    report.set_defaults(handler=_report)


def _store_of(run: Path) -> Path | None:
    store = run.parent.parent
    return store if RUN_FOLDER.match(run.name) and store.is_dir() else None


def _report(args: argparse.Namespace) -> int:
    try:
        run = resolve_run(args.store_dir)
        report = write_report(run_files(run))
    except OSError as error:
        print(f"kchaos: {error}", file=sys.stderr)
        return exit_codes.ERROR
    print(f"{state_label(report.state)}: wrote {report.path} and {len(report.plots)} plots")
    store = _store_of(run)
    if store is not None:
        print(f"index: {index_store(store)}")
    return 0
