"""The `vagrant` backend: the machines of a Vagrant directory, over SSH as `ssh`, plus what
only machines can do: switch off (power loss) and on, and freeze the whole kernel.

A node is reached as the `ssh` backend reaches it (`vagrant ssh-config`). Its libvirt
domain is the id vagrant-libvirt records in `.vagrant/machines/<node>/libvirt/id`, driven
with `virsh` on `$LIBVIRT_DEFAULT_URI` (default `qemu:///system`):

    power_off   virsh destroy: the machine stops at once; what its kernel had not written
                to the virtual disk is gone
    power_on    virsh start, then the node is prepared again once SSH answers (run dir,
                nft table: a boot starts with none); its services are the caller's to start
    suspend     virsh suspend: every vCPU stops; clocks jump forward on `resume`

The run record (`remote.json`) carries the Vagrant directory, so `attach` from another
process can do the same.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from harness.control.errors import CommandError, ProvisionError, RemoteError
from harness.control.inventory import Inventory
from harness.control.runstate import read_record
from harness.control.ssh import STATE_FILE, SSHRemote

__all__ = ["MachineControl", "VagrantRemote", "domain_id"]

BOOT_TIMEOUT = 600.0  # emulated CPUs (libvirt's qemu driver) boot in minutes


@runtime_checkable
class MachineControl(Protocol):
    """Nodes that are whole machines (the `vagrant` backend)."""

    def power_off(self, node: str) -> None: ...
    def power_on(self, node: str) -> None: ...
    def suspend(self, node: str) -> None: ...
    def resume(self, node: str) -> None: ...
    def machine_state(self, node: str) -> str: ...


def domain_id(vagrant_dir: Path | str, node: str) -> str:
    """The libvirt domain (UUID) vagrant-libvirt created for `node`."""
    path = Path(vagrant_dir) / ".vagrant" / "machines" / node / "libvirt" / "id"
    try:
        return path.read_text().strip()
    except OSError as error:
        raise ProvisionError(f"{node}: no libvirt machine recorded ({path}): is it up with "
                             "the libvirt provider?") from error


class VagrantRemote(SSHRemote):
    """`SSHRemote` over a Vagrant directory's machines, with `MachineControl`."""

    def __init__(self, inventory: Inventory, prefix: str, state_dir: Path,
                 accept_new_host_keys: bool = False,
                 addresses: Mapping[str, str] | None = None, vagrant_dir: str = "") -> None:
        super().__init__(inventory, prefix, state_dir, accept_new_host_keys, addresses)
        self.vagrant_dir = vagrant_dir

    @classmethod
    def attach(cls, state_dir: Path) -> VagrantRemote:
        remote = super().attach(state_dir)
        remote.vagrant_dir = read_record(state_dir, STATE_FILE)["vagrant_dir"]
        return remote

    def _record_options(self) -> dict[str, Any]:
        return {"vagrant_dir": self.vagrant_dir}

    # -- MachineControl ----------------------------------------------------------------------

    def power_off(self, node: str) -> None:
        self._virsh(node, "destroy")
        self._nodes[node].close()  # its TCP connections died with it

    def power_on(self, node: str, timeout: float = BOOT_TIMEOUT) -> None:
        """Start the machine and wait until it is prepared again (SSH, run dir, nft)."""
        self._virsh(node, "start")
        deadline = time.monotonic() + timeout
        while True:
            try:
                self._nodes[node].close()
                self._prepare(node)
                return
            except RemoteError as error:
                if time.monotonic() > deadline:
                    raise ProvisionError(f"{node}: not reachable {timeout:g} s after "
                                         f"`virsh start`: {error}") from error
                time.sleep(2)

    def suspend(self, node: str) -> None:
        self._virsh(node, "suspend")

    def resume(self, node: str) -> None:
        self._virsh(node, "resume")

    def machine_state(self, node: str) -> str:
        """libvirt's word for the domain: "running", "paused", "shut off", ..."""
        return self._virsh(node, "domstate").strip()

    def _virsh(self, node: str, action: str) -> str:
        self._host(node)
        argv = ["virsh", "-c", os.environ.get("LIBVIRT_DEFAULT_URI", "qemu:///system"), action,
                domain_id(self.vagrant_dir, node)]
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired) as error:
            raise CommandError(node, argv, str(error)) from error
        if done.returncode != 0:
            raise CommandError(node, argv, f"exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout

