"""Provisioning over SSH on sshd hosts in namespaces: wheels built here, uploaded, installed
into a venv per node (the hosts share this filesystem, so each under its own directory);
again is a no-op; an inventory `python` is only checked. Needs root."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from harness.control import ProvisionError
from harness.control.inventory import load_inventory
from harness.control.provision import PACKAGES, provision_hosts
from harness.control.ssh import SSHRemote
from tests.support.ssh_hosts import SshHosts, require_sshd

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    require_sshd()
    with SshHosts(["n1", "z1"], tmp_path_factory.mktemp("sshd")) as made:
        yield made
    assert made.leftovers() == []


def test_wheels_are_installed_into_a_venv_per_node_once(hosts, tmp_path):
    inventory = load_inventory(hosts.inventory(tmp_path / "i.toml", dir=str(tmp_path / "opt")))
    remote = SSHRemote.provision(inventory, tmp_path / "state")
    try:
        started = time.monotonic()
        done = provision_hosts(remote)
        first = time.monotonic() - started
        assert set(done) == {"n1", "z1"}
        for node in remote.nodes:
            assert done[node] and done[node][-1].startswith("kchaos: ")
            home = tmp_path / "opt" / node
            assert (home / "venv" / "bin" / "python").exists()
            assert any(p.name.startswith("kchaos-") for p in (home / "wheels").iterdir())
            out = remote.exec(node, ["python", "-c", "import broker, sys; print(sys.prefix)"]).out
            assert out.strip() == str(home / "venv")
        started = time.monotonic()
        assert provision_hosts(remote) == {"n1": [], "z1": []}
        print(f"provision: first {first:.1f} s, again {time.monotonic() - started:.2f} s")
    finally:
        remote.destroy()


def test_an_inventory_python_is_checked_not_installed(hosts, tmp_path):
    inventory = load_inventory(hosts.inventory(tmp_path / "i.toml", python=sys.executable,
                                               dir=str(tmp_path / "opt")))
    remote = SSHRemote.provision(inventory, tmp_path / "state")
    try:
        assert provision_hosts(remote, PACKAGES) == {"n1": [], "z1": []}
        assert not (tmp_path / "opt" / "n1" / "venv").exists()
    finally:
        remote.destroy()
    bad = load_inventory(hosts.inventory(tmp_path / "b.toml", python="/usr/bin/python3",
                                         dir=str(tmp_path / "opt")))
    remote = SSHRemote.provision(bad.select(["n1"]), tmp_path / "state")
    try:
        with pytest.raises(ProvisionError, match="cannot run the broker"):
            provision_hosts(remote, ())
    finally:
        remote.destroy()
    assert not any(Path(tmp_path / "state").iterdir())
