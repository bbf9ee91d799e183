"""`kchaos serve`: the store's index and runs over HTTP, read-only, on loopback by default."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from harness import exit_codes
from harness.store import index_store
from reports.server import DEFAULT_HOST, DEFAULT_PORT, make_server

__all__ = ["add_commands"]


def add_commands(commands: argparse._SubParsersAction) -> None:
    serve = commands.add_parser("serve", help="serve the store's index and runs over HTTP",
                                description="Serve a store read-only over HTTP.")
    serve.add_argument("--store", type=Path, default=Path("store"),
                       help="store directory (default %(default)s)")
    serve.add_argument("--host", default=DEFAULT_HOST, help="address (default %(default)s)")
    serve.add_argument("--port", type=int, default=DEFAULT_PORT, help="port (default %(default)s)")
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    try:
        server = make_server(args.store, index_store, args.host, args.port)
    except OSError as error:
        print(f"kchaos serve: cannot listen on {args.host} port {args.port}: "
              f"{error.strerror or error}; choose another with --port", file=sys.stderr)
        return exit_codes.ERROR
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
