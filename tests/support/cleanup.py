"""What a test leaves behind (namespaces, links, nft tables,
processes) and TCP reachability between namespaces."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import time
from pathlib import Path

from harness.control.local import LocalRemote

RUN_NAME = re.compile(r"\bkc[0-9a-f]{4}")


def leftovers(prefix: str) -> dict[str, list[str]]:
    """Anything the run `prefix` could leave behind (other runs may be live meanwhile)."""
    def names(argv):
        found = set(RUN_NAME.findall(subprocess.run(argv, capture_output=True,
                                                    text=True).stdout))
        return sorted(name for name in found if name == prefix)
    found = {
        "netns": names(["ip", "netns", "list"]),
        "links": names(["ip", "-o", "link", "show"]),
        "nft": names(["nft", "list", "tables"]),
        "processes": [line for line in subprocess.run(["ps", "-eo", "stat,args"],
                                                      capture_output=True, text=True
                                                      ).stdout.splitlines()
                      if f"/kchaos/{prefix}/" in line and not line.startswith("Z")],
    }
    return {kind: items for kind, items in found.items() if items}


def assert_nothing_left(prefix: str, state_root: Path | None = None) -> None:
    assert leftovers(prefix) == {}
    if state_root is not None:
        assert not (state_root / prefix).exists()


LISTENER = ("import socket,sys\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
            "socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',7000));s.listen(64)\n"
            "while True:\n c,_=s.accept();c.close()\n")


PROBE = ("import socket,sys,json,concurrent.futures as f\n"
         "def ok(a):\n try:\n  socket.create_connection((a,7000),0.4).close();return True\n"
         " except OSError:\n  return False\n"
         "t=sys.argv[1:]\nprint(json.dumps(dict(zip(t,f.ThreadPoolExecutor(16).map(ok,t)))))\n")


def listen_everywhere(remote: LocalRemote, tmp_path: Path) -> None:
    for node in remote.nodes:
        remote.spawn(node, [sys.executable, "-c", LISTENER], str(tmp_path / f"{node}.log"))
    deadline = time.monotonic() + 10
    for node in remote.nodes:
        while True:
            try:
                socket.create_connection((remote.address(node), 7000), 0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.02)


def reachability(remote: LocalRemote) -> dict[tuple[str, str], bool]:
    """Which node can open a TCP connection to which, probed from inside each namespace."""
    import json

    result = {}
    for source in remote.nodes:
        targets = [n for n in remote.nodes if n != source]
        out = remote.exec(source, [sys.executable, "-c", PROBE,
                                   *[remote.address(t) for t in targets]]).out
        answers = json.loads(out)
        for target in targets:
            result[(source, target)] = answers[remote.address(target)]
    return result
