"""Node clocks moved by the clock library, seen by real Python and Java processes in a
node's namespace: the wall clock jumps by the offset, the monotonic clock does not."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.control.clocks import ClockedRemote
from harness.control.local import LocalRemote
from tests.support import requirements
from tests.support.cleanup import assert_nothing_left

pytestmark = [pytest.mark.cluster, requirements.root()]

PYTHON_TICKER = """
import time
while True:
    print(time.time(), time.monotonic(), flush=True)
    time.sleep(0.05)
"""
JAVA_TICKER = """
public class Ticker {
    public static void main(String[] args) throws Exception {
        while (true) {
            System.out.println(System.currentTimeMillis() / 1000.0 + " " + System.nanoTime() / 1e9);
            Thread.sleep(50);
        }
    }
}
"""
HOUR = 3600.0


@pytest.fixture
def remote(tmp_path):
    local = LocalRemote.provision(["n1"], tmp_path / "state")
    try:
        yield ClockedRemote(local)
    finally:
        local.destroy()
        assert_nothing_left(local.network.prefix)


def ticks(log: Path) -> list[tuple[float, float]]:
    """(the process's wall clock, its monotonic clock) per line printed so far."""
    return [(float(wall), float(mono)) for wall, mono in
            (line.split() for line in log.read_text().splitlines() if line.strip())]


def wait_for_ticks(log: Path, count: int) -> list[tuple[float, float]]:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if log.exists() and len(found := ticks(log)) >= count:
            return found
        time.sleep(0.05)
    raise AssertionError(f"{log} has fewer than {count} ticks: {log.read_text()[-500:]}")


def assert_moves_only_the_wall_clock(remote: ClockedRemote, argv: list[str], log: Path
                                     ) -> None:
    process = remote.spawn("n1", argv, str(log))
    try:
        before = wait_for_ticks(log, 5)
        assert abs(before[-1][0] - time.time()) < 5
        remote.set_offset("n1", int(HOUR * 1000))
        time.sleep(0.5)
        after = wait_for_ticks(log, len(before) + 5)[-1]
        assert abs(after[0] - time.time() - HOUR) < 5, "the wall clock is an hour ahead"
        assert after[1] - before[-1][1] < 30, "the monotonic clock did not jump"
        remote.set_offset("n1", 0)
        time.sleep(0.5)
        back = wait_for_ticks(log, len(ticks(log)) + 3)[-1]
        assert abs(back[0] - time.time()) < 5
    finally:
        remote.signal("n1", process.pid, 9)


def test_a_python_process_on_the_node_sees_its_wall_clock_moved(remote, tmp_path):
    assert_moves_only_the_wall_clock(remote, [sys.executable, "-c", PYTHON_TICKER],
                                     tmp_path / "python.log")


def test_a_jvm_on_the_node_sees_its_wall_clock_moved(remote, tmp_path):
    (tmp_path / "Ticker.java").write_text(JAVA_TICKER)
    subprocess.run(["javac", "-d", str(tmp_path), str(tmp_path / "Ticker.java")], check=True)
    assert_moves_only_the_wall_clock(remote, ["java", "-cp", str(tmp_path), "Ticker"],
                                     tmp_path / "java.log")
    assert remote.offset("n1") == 0
