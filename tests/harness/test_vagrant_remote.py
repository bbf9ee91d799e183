"""The vagrant backend's run record and machine lookup (no SSH, no libvirt): attach from
another process gets a VagrantRemote that knows the Vagrant directory and its domains."""

from __future__ import annotations

import pytest

from harness.control import ProvisionError, backends
from harness.control.inventory import vagrant_inventory
from harness.control.runstate import owner_record
from harness.control.ssh import SSHRemote
from harness.control.vagrant import MachineControl, VagrantRemote, domain_id

SSH_CONFIG = """\
Host n1
  HostName 192.168.121.11
  User vagrant
  IdentityFile /v/.vagrant/machines/n1/libvirt/private_key
Host z1
  HostName 192.168.121.12
  User vagrant
  IdentityFile /v/.vagrant/machines/z1/libvirt/private_key
"""


def test_a_vagrant_run_is_attached_as_machines(tmp_path):
    vagrant_dir = tmp_path / "vagrant"
    machine = vagrant_dir / ".vagrant" / "machines" / "n1" / "libvirt"
    machine.mkdir(parents=True)
    (machine / "id").write_text("5b0e7f7e-2a4c-4c55-9d4e-0c6f1e2b9a10\n")
    state_dir = tmp_path / "state" / "kc1234"
    state_dir.mkdir(parents=True)
    remote = VagrantRemote(vagrant_inventory(vagrant_dir, SSH_CONFIG), "kc1234", state_dir,
                           vagrant_dir=str(vagrant_dir))
    remote._save(owner=owner_record())
    attached = backends.attach(state_dir)
    assert isinstance(attached, VagrantRemote) and isinstance(attached, MachineControl)
    assert attached.vagrant_dir == str(vagrant_dir) and attached.nodes == ("n1", "z1")
    assert domain_id(attached.vagrant_dir, "n1") == "5b0e7f7e-2a4c-4c55-9d4e-0c6f1e2b9a10"
    with pytest.raises(ProvisionError, match="z1: no libvirt machine recorded"):
        domain_id(attached.vagrant_dir, "z1")


def test_an_ssh_run_stays_ssh(tmp_path):
    state_dir = tmp_path / "kc5678"
    state_dir.mkdir()
    SSHRemote(vagrant_inventory(tmp_path, SSH_CONFIG), "kc5678", state_dir)._save(owner=None)
    attached = backends.attach(state_dir)
    assert type(attached) is SSHRemote and not isinstance(attached, MachineControl)
