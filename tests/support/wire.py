"""Raw Kafka frames over loopback for the bad-input tests: send bytes, read what comes back."""

from __future__ import annotations

import socket
import struct

__all__ = ["exchange", "frame", "request_frame"]


def frame(body: bytes) -> bytes:
    """Prefix `body` (header and request body) with its int32 size."""
    return struct.pack(">i", len(body)) + body


def request_frame(request, correlation_id: int = 1, client_id: str = "tests") -> bytes:
    """Header and body of a kafka-python request, without the size prefix."""
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True))


def exchange(port: int, payload: bytes, timeout: float = 3.0) -> bytes:
    """Send raw bytes to 127.0.0.1:`port`, half-close, then read until the broker closes,
    `timeout` passes between two reads, or 1 MiB has arrived."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as sock:
        try:
            sock.sendall(payload)
            sock.shutdown(socket.SHUT_WR)
        except OSError:
            return b""
        received = b""
        try:
            while len(received) < (1 << 20) and (chunk := sock.recv(65536)):
                received += chunk
        except (TimeoutError, ConnectionResetError):
            pass
        return received
