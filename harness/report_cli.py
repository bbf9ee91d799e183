"""`kchaos report STORE_DIR` and `kchaos serve`: reports of stored runs, and a server for them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from reports.index import write_index
from reports.report import verdict_label, write_report
from reports.run import RUN_FOLDER
from reports.server import DEFAULT_HOST, DEFAULT_PORT, make_server

__all__ = ["add_report_commands", "resolve_run"]

INPUT_ERROR = 3


def add_report_commands(subparsers: argparse._SubParsersAction) -> None:
    report = subparsers.add_parser(
        "report", help="write report.html, timeline.html and plots of a stored run",
        description="Render the HTML report of a run folder (store/<test>/<time>/; a store or "
        "test folder means its `latest` run) and regenerate the store's index.html.")
    report.add_argument("store_dir", metavar="STORE_DIR", type=Path)
    report.set_defaults(handler=_report)

    serve = subparsers.add_parser("serve", help="serve the store's index and runs over HTTP",
                                  description="Serve a store read-only over HTTP.")
    serve.add_argument("--store", type=Path, default=Path("store"),
                       help="store directory (default %(default)s)")
    serve.add_argument("--host", default=DEFAULT_HOST, help="address (default %(default)s)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s)")
    serve.set_defaults(handler=_serve)


def resolve_run(path: Path) -> Path:
    """The run folder a path names: itself, or its `latest` run (following store/latest)."""
    path = Path(path)
    for _ in range(2):
        if (path / "history.jsonl").exists() or (path / "test.json").exists() \
                or RUN_FOLDER.match(path.resolve().name):
            return path.resolve()
        if (path / "latest").exists():
            path = path / "latest"
    raise FileNotFoundError(f"{path}: not a run folder (no test.json or history.jsonl)")


def _store_of(run: Path) -> Path | None:
    store = run.parent.parent
    return store if RUN_FOLDER.match(run.name) and store.is_dir() else None


def _report(args: argparse.Namespace) -> int:
    try:
        run = resolve_run(args.store_dir)
        report = write_report(run)
    except OSError as error:
        print(f"kchaos: {error}", file=sys.stderr)
        return INPUT_ERROR
    print(f"{verdict_label(report.verdict)}: wrote {report.path} and {len(report.plots)} plots")
    store = _store_of(run)
    if store is not None:
        print(f"index: {write_index(store)}")
    return 0


def _serve(args: argparse.Namespace) -> int:
    try:
        server = make_server(args.store, args.host, args.port)
    except OSError as error:
        print(f"kchaos: {error}", file=sys.stderr)
        return INPUT_ERROR
    host, port = server.server_address[:2]
    print(f"serving {args.store.resolve()} at http://{host}:{port}/ (Ctrl-C to stop)",
          flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
