"""Loopback ports for the servers tests start, reserved across the test processes.

A port picked by binding to port 0 and closing the socket is free only for a moment: the
kernel hands it out again to any connection's ephemeral end, and a second pytest worker
can pick it too. These ports come from below the kernel's ephemeral range, so no
connection takes one, and each is locked (`flock` on a file per port) by the process that
picked it until that process exits, so no other test process picks it."""

from __future__ import annotations

import fcntl
import random
import socket
import tempfile
from pathlib import Path
from typing import IO

__all__ = ["free_port", "free_ports"]

LOCKS = Path(tempfile.gettempdir()) / "kchaos-test-ports"
RESERVED_RANGE = range(20000, 32000)
_held: list[IO[bytes]] = []


def free_port() -> int:
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback ports, free now and reserved for this process's lifetime."""
    first_ephemeral = _first_ephemeral_port()
    candidates = [port for port in RESERVED_RANGE if port < first_ephemeral]
    random.shuffle(candidates)
    LOCKS.mkdir(exist_ok=True)
    ports: list[int] = []
    for port in candidates:
        if len(ports) == count:
            return ports
        if _reserve(port):
            ports.append(port)
    raise RuntimeError(f"no {count} free loopback ports in {RESERVED_RANGE.start}-"
                       f"{RESERVED_RANGE.stop - 1} below the ephemeral range; locks in {LOCKS}")


def _reserve(port: int) -> bool:
    lock = open(LOCKS / f"{port}.lock", "ab")  # noqa: SIM115 - held until the process exits
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        return False
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            lock.close()
            return False
    _held.append(lock)
    return True


def _first_ephemeral_port() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768
