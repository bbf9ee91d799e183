"""Where nodes run: the backend choice, its options, and provisioning, attaching, listing
and destroying a run's nodes on any backend.

    local     network namespaces on a bridge (the default)
    ssh       the hosts of a TOML inventory; packages and kchaos installed over SSH
    vagrant   the machines of `vagrant ssh-config` in a directory, as ssh, plus power
              and freeze of whole machines (`harness.control.vagrant`)
    docker    one container per node

A run's state directory `<state root>/<prefix>` holds the backend's record
(`network.json`, `remote.json` or `docker.json`), written before anything exists, so a
run can be found and removed from another process even after its owner was SIGKILLed.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness.control.errors import ProvisionError, RemoteError
from harness.control.local import NETWORK_FILE, LocalRemote, destroy_run, run_prefixes
from harness.control.remote import Remote
from harness.control.runstate import read_record

__all__ = ["BACKENDS", "BRIDGED_BACKENDS", "MACHINE_BACKENDS", "RECORD_FILES", "BackendOptions",
           "attach", "destroy", "provision", "runs"]

BACKENDS = ("local", "ssh", "vagrant", "docker")
MACHINE_BACKENDS = ("vagrant",)  # nodes that are whole machines (`harness.control.vagrant`)
# Nodes on a bridge of this host, which the clients reach from the bridge's own address.
BRIDGED_BACKENDS = ("local", "docker")
SSH_STATE, DOCKER_STATE = "remote.json", "docker.json"
RECORD_FILES = (NETWORK_FILE, SSH_STATE, DOCKER_STATE)  # one per backend kind

HostPicker = Callable[[Any], Sequence[str]]


@dataclass(frozen=True, kw_only=True)
class BackendOptions:
    """Where the nodes run; declared options (see `harness.options`)."""

    backend: str = field(default="local", metadata={"help": "where nodes run",
                                                    "choices": BACKENDS})
    inventory: str | None = field(default=None, metadata={
        "help": "ssh backend: the hosts (see harness/control/inventory.py)",
        "metavar": "FILE.toml"})
    vagrant_dir: str | None = field(default=None, metadata={
        "help": "vagrant backend: the directory of the Vagrantfile", "metavar": "DIR"})
    accept_new_host_keys: bool = field(default=False, metadata={
        "help": "ssh, vagrant: trust and record host keys not in known_hosts"})
    no_install: bool = field(default=False, metadata={
        "help": "ssh, vagrant: skip installing packages and kchaos on the hosts"})
    docker_host: str | None = field(default=None, metadata={
        "help": "docker: the daemon (default: DOCKER_HOST or the local socket)",
        "metavar": "URL"})
    docker_image: str | None = field(default=None, metadata={
        "help": "docker: a node image to reuse instead of building one", "metavar": "IMAGE"})
    offset_clocks: bool = False  # node processes with movable clocks: set by the harness

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, "
                             f"got {self.backend!r}")
        if self.backend == "ssh" and not self.inventory:
            raise ValueError("the ssh backend needs an inventory (--inventory FILE.toml)")
        if self.backend == "vagrant" and not self.vagrant_dir:
            raise ValueError("the vagrant backend needs its directory (--vagrant-dir DIR)")

    def spec_options(self) -> dict[str, Any]:
        """The JSON options a cluster records for this backend (paths made absolute)."""
        ssh = {"install": not self.no_install, "accept_new_host_keys": self.accept_new_host_keys}
        if self.backend == "ssh":
            return {"inventory": str(Path(self.inventory or "").resolve()), **ssh}
        if self.backend == "vagrant":
            return {"vagrant_dir": str(Path(self.vagrant_dir or "").resolve()), **ssh}
        if self.backend == "docker":
            return {"base_url": self.docker_host, "image": self.docker_image}
        return {"offset_clocks": True} if self.offset_clocks else {}

    def inventory_hosts(self) -> Any:
        """The ssh or vagrant inventory (None for local and docker)."""
        from harness.control.inventory import load_inventory, vagrant_inventory

        if self.backend == "ssh":
            return load_inventory(self.inventory or "")
        if self.backend == "vagrant":
            return vagrant_inventory(self.vagrant_dir or "")
        return None


def provision(backend: str, options: Mapping[str, Any], nodes: Sequence[str],
              pick_hosts: HostPicker, state_root: Path | None) -> Remote:
    """Nodes named `nodes` (local, docker), or the inventory hosts that `pick_hosts` chooses
    (ssh, vagrant; packages and kchaos installed unless `options["install"]` is false)."""
    if backend == "local":
        return LocalRemote.provision(nodes, state_root)
    if backend == "docker":
        from harness.control.docker import DockerRemote

        return DockerRemote.provision(nodes, base_url=options.get("base_url"),
                                      image=options.get("image"), state_root=state_root)
    from harness.control.inventory import load_inventory, vagrant_inventory
    from harness.control.provision import provision_hosts
    from harness.control.ssh import SSHRemote

    if backend == "ssh":
        if not options.get("inventory"):
            raise ProvisionError("the ssh backend needs an inventory file")
        inventory = load_inventory(options["inventory"])
    elif backend == "vagrant":
        if not options.get("vagrant_dir"):
            raise ProvisionError("the vagrant backend needs the Vagrantfile's directory")
        inventory = vagrant_inventory(options["vagrant_dir"])
    else:
        raise ProvisionError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}")
    hosts = inventory.select(list(pick_hosts(inventory)))
    accept_new = bool(options.get("accept_new_host_keys", False))
    if backend == "vagrant":
        from harness.control.vagrant import VagrantRemote

        remote = VagrantRemote.provision(hosts, state_root, accept_new,
                                         vagrant_dir=str(Path(options["vagrant_dir"]).resolve()))
    else:
        remote = SSHRemote.provision(hosts, state_root, accept_new)
    try:
        if options.get("install", True):
            provision_hosts(remote)
    except BaseException:
        with contextlib.suppress(RemoteError):
            remote.destroy()
        raise
    return remote


def attach(state_dir: Path) -> Remote:
    """The remote of a recorded run, whatever its backend."""
    if (state_dir / SSH_STATE).exists():
        from harness.control.ssh import SSHRemote
        from harness.control.vagrant import VagrantRemote

        if "vagrant_dir" in read_record(state_dir, SSH_STATE):
            return VagrantRemote.attach(state_dir)
        return SSHRemote.attach(state_dir)
    if (state_dir / DOCKER_STATE).exists():
        from harness.control.docker import DockerRemote

        return DockerRemote.attach(state_dir)
    return LocalRemote.attach(state_dir)


def runs(root: Path, include_owned: bool = False) -> list[str]:
    """Prefixes of every backend's runs under `root` (see `local.run_prefixes`)."""
    prefixes = run_prefixes(root, include_owned)
    if any(root.glob(f"*/{SSH_STATE}")):
        from harness.control.ssh import ssh_runs

        prefixes += ssh_runs(root, include_owned)
    if any(root.glob(f"*/{DOCKER_STATE}")):
        from harness.control.docker import run_prefixes as docker_runs

        prefixes += docker_runs(root, include_owned)
    return sorted(prefixes)


def destroy(prefix: str, root: Path, workdir: str | None, remote: Remote | None = None) -> None:
    """Remove the run and, unless None, its work directory (`<base_dir>/<prefix>`): on the
    controlling host for local runs, on each node (its own subdirectory) for ssh runs."""
    state_dir = root / prefix
    if (state_dir / SSH_STATE).exists():
        from harness.control.ssh import SSHRemote

        ssh = remote if isinstance(remote, SSHRemote) else SSHRemote.attach(state_dir)
        if workdir:
            for node in ssh.nodes:
                with contextlib.suppress(RemoteError):
                    ssh.exec(node, ["rm", "-rf", f"{workdir}/{node}"])
                    ssh.exec(node, ["rmdir", workdir], check=False)
        ssh.destroy()
        return
    if (state_dir / DOCKER_STATE).exists():
        from harness.control.docker import destroy_run as destroy_docker_run

        destroy_docker_run(prefix, root)
        return
    destroy_run(prefix, root)
    if workdir:
        shutil.rmtree(workdir, ignore_errors=True)
