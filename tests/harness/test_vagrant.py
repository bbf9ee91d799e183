"""vagrant/Vagrantfile under `vagrant validate --ignore-provider` (Debian's vagrant package;
no provider, no VMs), its settings layers, and the inventory read from `vagrant ssh-config`."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from harness.control import ProvisionError
from harness.control.inventory import parse_ssh_config, vagrant_inventory
from tests.support import requirements

VAGRANT_DIR = Path(__file__).resolve().parent.parent.parent / "vagrant"
SSH_CONFIG = """\
Host n1
  HostName 127.0.0.1
  User vagrant
  Port 2222
  UserKnownHostsFile /dev/null
  StrictHostKeyChecking no
  IdentityFile "/home/u/kchaos/vagrant/.vagrant/machines/n1/libvirt/private_key"
  IdentitiesOnly yes

Host z1
  HostName 192.168.121.40
  User vagrant
  Port 22
  IdentityFile /home/u/kchaos/vagrant/.vagrant/machines/z1/libvirt/private_key

Host c1
  HostName 192.168.121.42
  User vagrant
  Port 22

Host n2
  HostName 192.168.121.41
  User vagrant
  Port 22
  IdentityFile /home/u/.vagrant.d/insecure_private_key

Host other
  HostName 10.0.0.9
"""


def validate(directory: Path, **env: str) -> subprocess.CompletedProcess:
    if not shutil.which("vagrant"):
        requirements.unmet("vagrant is not installed (Debian package vagrant)")
    return subprocess.run(["vagrant", "validate", "--ignore-provider"], cwd=directory,
                          env={**os.environ, "VAGRANT_CHECKPOINT_DISABLE": "1", **env},
                          capture_output=True, text=True, timeout=120)


def machines(output: str) -> list[str]:
    return re.findall(r"==> (\w+): Ignoring provider config", output)


@pytest.fixture
def vagrant_dir(tmp_path):
    """A copy of vagrant/, so validation leaves no .vagrant/ in the checkout."""
    shutil.copy(VAGRANT_DIR / "Vagrantfile", tmp_path / "Vagrantfile")
    return tmp_path


def test_vagrantfile_validates_with_defaults(vagrant_dir):
    done = validate(vagrant_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "validated successfully" in done.stdout
    assert machines(done.stdout) == ["n1", "n2", "n3", "n4", "n5", "z1", "z2", "z3"]


def test_environment_overrides_vagrantfile_local(vagrant_dir):
    (vagrant_dir / "Vagrantfile.local").write_text(
        'SETTINGS["brokers"] = 2\nSETTINGS["zookeepers"] = 2\nSETTINGS["memory"] = 1024\n')
    done = validate(vagrant_dir)
    assert done.returncode == 0, done.stdout + done.stderr
    assert machines(done.stdout) == ["n1", "n2", "z1", "z2"]
    done = validate(vagrant_dir, KCHAOS_ZOOKEEPERS="1", KCHAOS_PROVIDER="virtualbox")
    assert done.returncode == 0, done.stdout + done.stderr
    assert machines(done.stdout) == ["n1", "n2", "z1"]
    done = validate(vagrant_dir, KCHAOS_ZOOKEEPERS="1", KCHAOS_CONTROLLERS="3")
    assert done.returncode == 0, done.stdout + done.stderr
    assert machines(done.stdout) == ["n1", "n2", "z1", "c1", "c2", "c3"]
    done = validate(vagrant_dir, KCHAOS_ZOOKEEPERS="0", KCHAOS_CONTROLLERS="1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert machines(done.stdout) == ["n1", "n2", "c1"]


@pytest.mark.parametrize("variable, value, message", [
    ("KCHAOS_BROKERS", "0", "brokers must be an integer of at least 1"),
    ("KCHAOS_ZOOKEEPERS", "-1", "zookeepers must be an integer of at least 0"),
    ("KCHAOS_MEMORY", "lots", "memory must be an integer of at least 1"),
    ("KCHAOS_NETWORK", "192.168", "network must be three octets"),
    ("KCHAOS_PROVIDER", "hyperv", "provider must be libvirt or virtualbox"),
    ("KCHAOS_LIBVIRT_DRIVER", "xen", "libvirt_driver must be kvm or qemu"),
    ("KCHAOS_CONTROLLERS", "10", "controllers must be 0 to 9"),
])
def test_bad_settings_are_refused(vagrant_dir, variable, value, message):
    done = validate(vagrant_dir, **{variable: value})
    assert done.returncode != 0
    assert message in done.stdout + done.stderr


def test_inventory_from_vagrant_ssh_config(tmp_path):
    assert parse_ssh_config(SSH_CONFIG)["n1"]["identityfile"].endswith("n1/libvirt/private_key")
    inventory = vagrant_inventory(tmp_path, SSH_CONFIG)
    assert inventory.names == ("n1", "n2", "c1", "z1")
    assert inventory.with_role("broker") == ("n1", "n2")
    assert inventory.with_role("zookeeper") == ("z1",)
    assert inventory.with_role("controller") == ("c1",)
    n1 = inventory.host("n1")
    assert (n1.host, n1.port, n1.user, n1.address) == ("127.0.0.1", 2222, "vagrant", None)
    assert n1.known_hosts == str(tmp_path / ".vagrant" / "kchaos_known_hosts")
    assert n1.home == "/opt/kchaos/n1"
    with pytest.raises(ProvisionError, match="no nodes"):
        vagrant_inventory(tmp_path, "Host other\n  HostName 10.0.0.9\n")
