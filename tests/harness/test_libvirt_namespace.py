"""The smoke part of `make test-vagrant` for `make test`: libvirtd and virtlogd started by
hand in their own network namespace, a libvirt network whose bridge and dnsmasq live only
there, and a teardown that leaves nothing (harness.control.libvirt_host; no VM)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from harness.control import libvirt_host
from tests.support import requirements

pytestmark = [
    pytest.mark.cluster,
    requirements.root(),
    requirements.tools("libvirtd", "virtlogd", package="libvirt-daemon-system"),
    requirements.tools("virsh", package="libvirt-clients"),
    requirements.tools("qemu-system-x86_64", package="qemu-system-x86"),
]

NETWORK = """<network>
  <name>kchaos-smoke</name>
  <bridge name='kcsmoke0'/>
  <ip address='192.168.199.1' netmask='255.255.255.0'/>
</network>"""


def virsh(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(["virsh", "-c", libvirt_host.URI, *argv], capture_output=True,
                          text=True, timeout=60)


def net_namespace(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/net")


def test_libvirt_lives_in_its_namespace_and_leaves_nothing(tmp_path):
    if libvirt_host.running():
        pytest.skip("a libvirt host of another run is up (make test-vagrant?)")
    libvirt_host.up()
    try:
        namespace = os.stat(f"/run/netns/{libvirt_host.NAMESPACE}").st_ino
        daemon = int((libvirt_host.state_dir() / "libvirtd.pid").read_text())
        assert net_namespace(daemon) == f"net:[{namespace}]"
        assert net_namespace(daemon) != net_namespace(os.getpid())
        definition = tmp_path / "network.xml"
        definition.write_text(NETWORK)
        created = virsh("net-create", str(definition))
        assert created.returncode == 0, created.stderr
        inside = subprocess.run(libvirt_host.exec_argv(["ip", "-4", "addr", "show", "kcsmoke0"]),
                                capture_output=True, text=True, timeout=30)
        assert "192.168.199.1/24" in inside.stdout, inside.stderr
        assert not Path("/sys/class/net/kcsmoke0").exists(), "the bridge leaked out"
    finally:
        removed = libvirt_host.down()
    assert "network kchaos-smoke" in removed and f"namespace {libvirt_host.NAMESPACE}" in removed
    assert not libvirt_host.running()
    assert libvirt_host.NAMESPACE not in subprocess.run(
        ["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert not Path(f"/proc/{daemon}").exists()
