"""The ssh backend's costs, on sshd hosts in network namespaces of this machine (root).

    python bench/ssh_remote.py [--commands 200]

Prints: seconds per remote command over the persistent shell (median and 95th percentile
of `--commands` runs of `true`, and of one new SSH session per command for comparison);
the time to provision a fresh host (packages already installed: the dpkg check, building
the wheels here, upload, venv and install) and to provision it again; and the time of
`Cluster.up` for 3 brokers and 1 ZooKeeper (inventory `python` reusing this venv).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from harness.control.inventory import load_inventory  # noqa: E402
from harness.control.provision import provision_hosts  # noqa: E402
from harness.control.ssh import SSHRemote  # noqa: E402
from harness.db import Cluster, ClusterSpec  # noqa: E402
from tests.support.ssh_hosts import SshHosts  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--commands", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="kchaos-bench-ssh-") as scratch:
        work = Path(scratch)
        with SshHosts(["n1", "n2", "n3", "z1"], work / "sshd") as hosts:
            commands(hosts, work, args.commands)
            provisioning(hosts, work)
            cluster_up(hosts, work)
    return 0


def commands(hosts: SshHosts, work: Path, count: int) -> None:
    inventory = load_inventory(hosts.inventory(work / "c.toml"))
    remote = SSHRemote.provision(inventory.select(["n1"]), work / "state")
    try:
        remote.exec("n1", ["true"])
        seconds = []
        for _ in range(count):
            started = time.perf_counter()
            remote.exec("n1", ["true"])
            seconds.append(time.perf_counter() - started)
        sessions = []
        client = remote._nodes["n1"].connect()
        for _ in range(min(count, 50)):
            started = time.perf_counter()
            _, out, _ = client.exec_command("true")
            out.channel.recv_exit_status()
            sessions.append(time.perf_counter() - started)
    finally:
        remote.destroy()
    print(f"remote command, persistent shell: median {statistics.median(seconds) * 1e3:.2f} ms, "
          f"p95 {statistics.quantiles(seconds, n=20)[-1] * 1e3:.2f} ms ({count} runs)")
    print(f"remote command, new session each: median {statistics.median(sessions) * 1e3:.2f} ms "
          f"({len(sessions)} runs)")


def provisioning(hosts: SshHosts, work: Path) -> None:
    inventory = load_inventory(hosts.inventory(work / "p.toml", dir=str(work / "opt")))
    remote = SSHRemote.provision(inventory.select(["n1"]), work / "state")
    try:
        started = time.monotonic()
        provision_hosts(remote)
        fresh = time.monotonic() - started
        started = time.monotonic()
        provision_hosts(remote)
        again = time.monotonic() - started
    finally:
        remote.destroy()
    print(f"provision a fresh host (packages present; wheels built, uploaded, venv, install): "
          f"{fresh:.1f} s; again (no-op): {again:.1f} s")


def cluster_up(hosts: SshHosts, work: Path) -> None:
    inventory = hosts.inventory(work / "u.toml", python=sys.executable, dir=str(work / "opt"))
    spec = ClusterSpec(brokers=3, zookeepers=1, base_dir=str(work / "cluster"), backend="ssh",
                       options={"inventory": str(inventory)})
    started = time.monotonic()
    cluster = Cluster.up(spec, work / "state")
    up = time.monotonic() - started
    started = time.monotonic()
    cluster.down()
    print(f"cluster up on ssh, 3 brokers + 1 ZooKeeper: {up:.1f} s "
          f"(down {time.monotonic() - started:.1f} s)")


if __name__ == "__main__":
    sys.exit(main())
