"""`kchaos serve`: the index and runs over HTTP, and nothing outside the store."""

from __future__ import annotations

import http.client
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.store import index_store, run_files
from reports import make_server, write_report
from tests.support.ports import free_port

FIXTURES = Path(__file__).parent.parent / "data" / "store"


@pytest.fixture
def store(tmp_path: Path) -> Path:
    copy = tmp_path / "store"
    shutil.copytree(FIXTURES, copy, symlinks=True)
    write_report(run_files(copy / "queue-valid" / "latest"))
    secret = tmp_path / "secret"
    secret.mkdir()
    (secret / "passwords.txt").write_text("hunter2\n")
    (copy / "outside").symlink_to(secret)
    (copy / "queue-valid" / "leak.txt").symlink_to(secret / "passwords.txt")
    return copy


@pytest.fixture
def served(store: Path) -> Iterator[tuple[str, int]]:
    server = make_server(store, index_store, port=0, quiet=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[:2]
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def get(address: tuple[str, int], path: str) -> tuple[int, bytes]:
    """GET `path` sent exactly as given (no client-side normalisation)."""
    connection = http.client.HTTPConnection(*address, timeout=10)
    try:
        connection.putrequest("GET", path, skip_accept_encoding=True)
        connection.endheaders()
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def test_binds_loopback_by_default(store: Path) -> None:
    server = make_server(store, index_store, port=0)
    try:
        assert server.server_address[0] == "127.0.0.1"
    finally:
        server.server_close()


def test_serves_the_index_and_a_run(served: tuple[str, int]) -> None:
    status, body = get(served, "/")
    assert status == 200 and b"kchaos runs" in body and b"queue-anomalies" in body
    status, body = get(served, "/queue-valid/latest/report.html")
    assert status == 200 and b"VALID" in body
    status, body = get(served, "/queue-valid/20250101T000000/latency-raw.png")
    assert status == 200 and body.startswith(b"\x89PNG")
    status, body = get(served, "/queue-valid/20250101T000000/history.jsonl")
    assert status == 200 and body.startswith(b'{"index": 0')


def test_index_is_regenerated_when_asked_for(served: tuple[str, int], store: Path) -> None:
    shutil.rmtree(store / "harness-error")
    status, body = get(served, "/index.html")
    assert status == 200 and b"harness-error" not in body and b"4 runs" in body


@pytest.mark.parametrize("path", [
    "/../secret/passwords.txt",
    "/queue-valid/../../secret/passwords.txt",
    "/%2e%2e/secret/passwords.txt",
    "/%2E%2E/%2e%2e/etc/passwd",
    "/queue-valid/%2e%2e%2f%2e%2e%2fsecret/passwords.txt",
    "/..%5c..%5csecret/passwords.txt",
    "/outside/passwords.txt",
    "/outside/",
    "/queue-valid/leak.txt",
    "/queue-valid/%00/report.html",
])
def test_never_serves_outside_the_store(served: tuple[str, int], path: str) -> None:
    status, body = get(served, path)
    assert status == 404, path
    assert b"hunter2" not in body and b"root:" not in body


def _interruptible() -> None:
    """In the child: SIGINT as a terminal gives it, whatever the test run inherited (a
    background job of a non-interactive shell ignores SIGINT, and so would the child)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_kchaos_serve_command(store: Path) -> None:
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "harness.cli", "serve", "--store", str(store), "--port",
         str(port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        cwd=Path(__file__).parent.parent.parent, preexec_fn=_interruptible)
    try:
        banner = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/" in banner
        deadline = time.monotonic() + 10
        while True:
            try:
                status, body = get(("127.0.0.1", port), "/queue-valid/latest/report.html")
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        assert status == 200 and b"VALID" in body
    finally:
        os.kill(process.pid, signal.SIGINT)
        try:
            assert process.wait(10) == 0
        finally:
            if process.poll() is None:
                process.kill()  # a failed test leaves no server behind
                process.wait()
            process.stdout.close()
