"""The local backend on real network namespaces: provisioning, commands, processes,
firewall, teardown, and cleanup after a SIGKILLed owner. Needs root."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from harness.control import CommandFailed, CommandNotFound, UnknownNode, local
from harness.control.local import LocalRemote, destroy_run, run_prefixes
from tests.support import requirements
from tests.support.cleanup import (
    LISTENER,
    assert_nothing_left,
    leftovers,
    listen_everywhere,
    reachability,
)

pytestmark = [
    pytest.mark.cluster,
    requirements.root(),
]













@pytest.fixture
def state_root(tmp_path):
    root = tmp_path / "state"
    yield root
    prefixes = run_prefixes(root, include_owned=True)
    for prefix in prefixes:
        LocalRemote.attach(root / prefix).destroy()
    for prefix in prefixes:
        assert_nothing_left(prefix, root)


def test_provision_exec_spawn_signal_and_destroy(state_root, tmp_path):
    remote = LocalRemote.provision(["n1", "n2", "z1"], state_root)
    net = remote.network
    assert re.fullmatch(r"kc[0-9a-f]{4}", net.prefix)
    assert all(len(name) <= 15 for name in [net.bridge] + [net.veth(n) for n in net.nodes])
    assert remote.address("n2") == f"10.77.{net.subnet}.11"
    assert f"{net.netns('n1')}" in subprocess.run(["ip", "netns", "list"], capture_output=True,
                                                   text=True).stdout
    exit, out, err = remote.exec("n1", ["ip", "-4", "-o", "addr", "show", "dev", "eth0"])
    assert exit == 0 and remote.address("n1") in out
    routes = remote.exec("n1", ["ip", "route"]).out
    assert "default" not in routes
    assert remote.exec("n1", ["cat", "/proc/sys/net/ipv6/conf/all/disable_ipv6"]).out == "1\n"
    with pytest.raises(CommandFailed) as failed:
        remote.exec("n1", ["sh", "-c", "echo oops >&2; exit 3"])
    assert failed.value.exit == 3 and "oops" in failed.value.err
    assert remote.exec("n1", ["false"], check=False).exit == 1
    with pytest.raises(CommandNotFound):
        remote.exec("n1", ["no-such-program-kchaos"])
    with pytest.raises(UnknownNode):
        remote.exec("n9", ["true"])

    process = remote.spawn("n2", ["sleep", "60"], str(tmp_path / "sleep.log"))
    time.sleep(0.05)
    assert remote.running("n2", process.pid)
    assert not remote.running("n1", process.pid)
    assert remote.signal("n2", process.pid, signal.SIGSTOP)
    assert remote.signal("n2", process.pid, signal.SIGCONT)
    assert remote.signal("n2", process.pid, signal.SIGKILL)
    assert not remote.running("n2", process.pid)
    assert not remote.signal("n2", process.pid, signal.SIGKILL)

    source = tmp_path / "up.txt"
    source.write_text("hello")
    remote.upload("z1", source, str(tmp_path / "node" / "copy.txt"))
    remote.download("z1", str(tmp_path / "node" / "copy.txt"), tmp_path / "back" / "b.txt")
    assert (tmp_path / "back" / "b.txt").read_text() == "hello"

    other = remote.spawn("z1", ["sleep", "60"], str(tmp_path / "sleep2.log"))
    remote.destroy()
    assert not remote.running("z1", other.pid)
    assert_nothing_left(net.prefix, state_root)
    remote.destroy()


def test_firewall_drops_by_source_and_heals(state_root, tmp_path):
    remote = LocalRemote.provision(["n1", "n2", "n3"], state_root)
    listen_everywhere(remote, tmp_path)
    assert all(reachability(remote).values())
    remote.firewall("n2", drop_from=["n1"])
    seen = reachability(remote)
    assert not seen[("n1", "n2")] and not seen[("n2", "n1")]
    assert seen[("n3", "n2")] and seen[("n1", "n3")]
    socket.create_connection((remote.address("n2"), 7000), 1).close()
    rules = remote.exec("n2", ["nft", "list", "table", "inet", remote.network.table]).out
    assert remote.address("n1") in rules
    remote.firewall("n2", loss_from={"n3": 1.0})
    seen = reachability(remote)
    assert seen[("n1", "n2")] and not seen[("n3", "n2")]
    remote.firewall("n2")
    assert all(reachability(remote).values())
    remote.destroy()


def test_two_runs_started_at_once_from_different_state_roots_get_different_subnets(
        tmp_path, monkeypatch):
    """Two runs provisioned at the same moment, each with its own state root (a test's
    KCHAOS_STATE_DIR beside a night's runs), both read the routing table before either has
    its bridge; from the same starting subnet both would take the same /24, and one run's
    clients would reach the other's nodes. The second must wait for the first's bridge."""
    read_routes = local._routed_networks
    together = threading.Barrier(2, timeout=3)

    def routes_read_together():
        networks = read_routes()
        with contextlib.suppress(threading.BrokenBarrierError):
            together.wait()
        return networks

    monkeypatch.setattr(local, "_routed_networks", routes_read_together)
    monkeypatch.setattr(local.secrets, "randbelow", lambda bound: 0)
    roots = [tmp_path / "a", tmp_path / "b"]
    with ThreadPoolExecutor(2) as pool:
        provisions = [pool.submit(LocalRemote.provision, ["n1"], root) for root in roots]
    remotes = [p.result() for p in provisions if p.exception() is None]
    try:
        assert len(remotes) == 2, [p.exception() for p in provisions]
        assert remotes[0].network.subnet != remotes[1].network.subnet
    finally:
        for remote in remotes:
            remote.destroy()
    for remote, root in zip(remotes, roots, strict=True):
        assert_nothing_left(remote.network.prefix, root)


def test_kchaos_cluster_down_cleans_up_after_a_sigkilled_owner(tmp_path):
    root = tmp_path / "state"
    script = (
        "import sys, time\n"
        "from harness.control.local import LocalRemote\n"
        f"r = LocalRemote.provision(['n1', 'n2'], __import__('pathlib').Path({str(root)!r}))\n"
        "r.spawn('n1', ['sleep', '300'], sys.argv[1])\n"
        "print(r.network.prefix, flush=True)\n"
        "time.sleep(300)\n")
    owner = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "s.log")],
                             stdout=subprocess.PIPE, text=True)
    prefix = owner.stdout.readline().strip()
    try:
        assert prefix and run_prefixes(root) == []
        owner.kill()
        owner.wait()
        assert leftovers(prefix)["netns"] == [prefix]
        assert run_prefixes(root) == [prefix]
        env = dict(os.environ, KCHAOS_STATE_DIR=str(root))
        done = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "down"],
                              env=env, capture_output=True, text=True, timeout=60)
    finally:
        owner.kill()
        owner.wait()
        if prefix:
            destroy_run(prefix, root)
    assert done.returncode == 0, done.stderr
    assert prefix in done.stdout
    assert_nothing_left(prefix, root)
    again = subprocess.run([sys.executable, "-m", "harness.cli", "cluster", "down"], env=env,
                           capture_output=True, text=True, timeout=60)
    assert again.returncode == 0 and "removed 0" in again.stdout


def test_not_root_reexecs_in_a_user_namespace():
    """As an unprivileged user, provisioning works inside a user namespace (or says why not)."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="kchaos-userns-"))
    script = (
        "import sys\n"
        "from harness.control.userns import ensure_root\n"
        "ensure_root(sys.argv[1:], module='tests.harness.test_control_local')\n")
    user = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups"]
    # the interpreter must be executable by the unprivileged user (pyenv's under /root is not)
    python = "/usr/bin/python3"
    site = next(p for p in sys.path if p.endswith("site-packages") and ".venv" in p)
    env = dict(os.environ, XDG_RUNTIME_DIR=str(tmp_path),
               PYTHONPATH=os.pathsep.join([os.getcwd(), site]))
    os.chmod(tmp_path, 0o777)
    if subprocess.run([*user, python, "-c", "import harness.control"], env=env,
                      capture_output=True).returncode != 0:
        pytest.skip(f"{python} cannot import the project as an unprivileged user")
    try:
        done = subprocess.run([*user, python, "-c", script, "probe"], env=env,
                              capture_output=True, text=True, timeout=60, cwd=os.getcwd())
    finally:
        shutil.rmtree(tmp_path, ignore_errors=True)
    if "needs root" in done.stderr:
        pytest.skip("no unprivileged user namespaces here: " + done.stderr.strip()[-200:])
    assert done.returncode == 0, done.stderr
    assert "provisioned kc" in done.stdout and "reachable" in done.stdout


def _probe_in_user_namespace() -> None:
    """Entry point of the re-executed test process
    (`python -m tests.harness.test_control_local`)."""
    from harness.control.userns import ensure_root, in_user_namespace

    ensure_root(sys.argv[1:], module="tests.harness.test_control_local")
    assert in_user_namespace() and os.geteuid() == 0
    remote = LocalRemote.provision(["n1", "n2"])
    try:
        print(f"provisioned {remote.network.prefix}")
        remote.exec("n1", [sys.executable, "-c", "pass"])
        log = os.environ["XDG_RUNTIME_DIR"] + "/listener.log"
        remote.spawn("n2", [sys.executable, "-c", LISTENER], log)
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection((remote.address("n2"), 7000), 0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        print("reachable")
    finally:
        remote.destroy()


if __name__ == "__main__":
    _probe_in_user_namespace()
