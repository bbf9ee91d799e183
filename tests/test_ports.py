"""The test servers' loopback ports: below the ephemeral range, and never the same in two
test processes at once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.support.ports import _first_ephemeral_port, free_ports

ROOT = Path(__file__).resolve().parent.parent
HOLDER = ("import sys; from tests.support.ports import free_ports; "
          "print(*free_ports(200), flush=True); sys.stdin.read()")


def test_two_processes_never_get_the_same_port_and_none_is_ephemeral():
    holder = subprocess.Popen([sys.executable, "-c", HOLDER], cwd=ROOT, text=True,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        theirs = {int(port) for port in holder.stdout.readline().split()}
        mine = set(free_ports(200))
    finally:
        holder.communicate("", timeout=30)
    assert len(theirs) == len(mine) == 200
    assert not theirs & mine
    assert max(theirs | mine) < _first_ephemeral_port()
