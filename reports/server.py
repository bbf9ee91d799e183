"""`kchaos serve`: the store's index and every run folder over HTTP, read-only.

Binds 127.0.0.1 unless told otherwise. A request path is decoded once, and
refused (404) when any segment is `..` or `.`, holds a NUL or a backslash, or
when the real path it names (symlinks resolved) is outside the store. The
index is regenerated (by the `index` function the server is given: the store's,
`harness.store.index_store`) whenever it is asked for.
"""

from __future__ import annotations

import os
import posixpath
import urllib.parse
from collections.abc import Callable
from functools import partial
from http import HTTPStatus
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

__all__ = ["DEFAULT_HOST", "DEFAULT_PORT", "StoreHandler", "inside_store", "make_server"]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8080


def inside_store(store: Path, url_path: str) -> Path | None:
    """The file a URL path names inside `store`, or None if it would leave the store."""
    path = urllib.parse.unquote(url_path.split("?", 1)[0].split("#", 1)[0])
    segments = [s for s in path.split("/") if s]
    if any(s in ("..", ".") or "\x00" in s or "\\" in s for s in segments):
        return None
    root = store.resolve()
    target = root.joinpath(*segments)
    real = Path(os.path.realpath(target))
    if real != root and root not in real.parents:
        return None
    return target


class StoreHandler(SimpleHTTPRequestHandler):
    """Serves one store directory; nothing outside it, no uploads."""

    def __init__(self, *args, store: Path, index: Callable[[Path], Path], quiet: bool = False,
                 **kwargs) -> None:
        self.store = store
        self.index = index
        self.quiet = quiet
        super().__init__(*args, directory=str(store), **kwargs)

    def translate_path(self, path: str) -> str:
        target = inside_store(self.store, path)
        if target is None:
            return ""
        return str(target)

    def send_head(self):
        path = self.path.split("?", 1)[0]
        if posixpath.normpath(urllib.parse.unquote(path)) in ("/", "/index.html"):
            self.index(self.store)
        if not self.translate_path(self.path):
            self.send_error(HTTPStatus.NOT_FOUND, "Not found")
            return None
        return super().send_head()

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - the base class's name
        if not self.quiet:
            super().log_message(format, *args)


class StoreServer(ThreadingHTTPServer):
    """A threading HTTP server that stops at once: closing it does not wait for requests
    in flight (their threads are daemons), so Ctrl-C ends `kchaos serve` promptly."""

    daemon_threads = True
    block_on_close = False


def make_server(store: str | Path, index: Callable[[Path], Path], host: str = DEFAULT_HOST,
                port: int = DEFAULT_PORT, quiet: bool = False) -> ThreadingHTTPServer:
    """A server for `store` whose index page `index(store)` writes (not yet serving: call
    `serve_forever`)."""
    store = Path(store).resolve()
    if not store.is_dir():
        raise FileNotFoundError(f"{store}: no such store directory")
    index(store)
    return StoreServer((host, port), partial(StoreHandler, store=store, index=index,
                                             quiet=quiet))
