"""Which SSH hosts make up a cluster: a TOML inventory, or `vagrant ssh-config` of a directory.

An inventory file:

    [defaults]                       # optional; any node field except name, host, role
    user = "root"                    # not root: every command runs under `sudo -n`
    key_file = "~/.ssh/id_ed25519"
    known_hosts = "~/.ssh/known_hosts"
    dir = "/opt/kchaos"              # the node keeps its files under <dir>/<name>/
    python = ""                      # a Python that already has kchaos: no wheel install

    [[node]]
    name = "n1"
    host = "192.0.2.11"              # where SSH connects
    port = 22
    role = "broker"                  # broker | zookeeper | controller (KRaft, dedicated)
    address = "10.0.0.11"            # optional: the address nodes reach each other at

Keys are referenced by path only; their contents are read by paramiko and never stored.
"""

from __future__ import annotations

import os
import re
import subprocess
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from harness.control.errors import ProvisionError

__all__ = ["Host", "Inventory", "load_inventory", "parse_ssh_config", "vagrant_inventory"]

ROLES = ("broker", "zookeeper", "controller")
NODE_NAME = re.compile(r"^[a-z][a-z0-9-]{0,31}$")
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
VAGRANT_KNOWN_HOSTS = ".vagrant/kchaos_known_hosts"


@dataclass(frozen=True)
class Host:
    """One SSH node. `address` (default `host`) is where other nodes and the controlling
    host reach its services; `dir` holds this node's files under `<dir>/<name>`."""

    name: str
    host: str
    role: str
    port: int = 22
    user: str = "root"
    key_file: str | None = None
    known_hosts: str = DEFAULT_KNOWN_HOSTS
    address: str | None = None
    dir: str = "/opt/kchaos"
    python: str | None = None

    def __post_init__(self) -> None:
        if not NODE_NAME.match(self.name):
            raise ProvisionError(f"node name {self.name!r} must match {NODE_NAME.pattern}")
        if self.role not in ROLES:
            raise ProvisionError(f"{self.name}: role must be one of {ROLES}, got {self.role!r}")
        if not 0 < self.port < 65536:
            raise ProvisionError(f"{self.name}: bad port {self.port}")
        if not self.dir.startswith("/"):
            raise ProvisionError(f"{self.name}: dir must be absolute, got {self.dir!r}")

    @property
    def home(self) -> str:
        """This node's own directory on the host."""
        return f"{self.dir.rstrip('/')}/{self.name}"

    @property
    def service_address(self) -> str:
        return self.address or self.host

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Inventory:
    hosts: tuple[Host, ...]

    def __post_init__(self) -> None:
        names = [h.name for h in self.hosts]
        if not names:
            raise ProvisionError("the inventory has no nodes")
        if len(set(names)) != len(names):
            raise ProvisionError(f"duplicate node names in {names}")

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts)

    def host(self, name: str) -> Host:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)

    def with_role(self, role: str) -> tuple[str, ...]:
        return tuple(h.name for h in self.hosts if h.role == role)

    def select(self, names: Iterable[str]) -> Inventory:
        wanted = set(names)
        return Inventory(tuple(h for h in self.hosts if h.name in wanted))

    def to_json(self) -> list[dict]:
        return [h.to_json() for h in self.hosts]

    @classmethod
    def from_json(cls, data: Sequence[Mapping]) -> Inventory:
        return cls(tuple(Host(**item) for item in data))


def load_inventory(path: Path | str) -> Inventory:
    """Parse a TOML inventory; raises ProvisionError naming the file and the problem."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as error:
        raise ProvisionError(f"{path}: {error}") from error
    known = {f.name for f in fields(Host)}
    defaults = data.get("defaults", {})
    unknown = set(data) - {"defaults", "node"}
    bad_defaults = set(defaults) - (known - {"name", "host", "role"})
    if unknown or bad_defaults:
        raise ProvisionError(f"{path}: unknown keys {sorted(unknown | bad_defaults)}")
    hosts = []
    for index, node in enumerate(data.get("node", [])):
        if set(node) - known or not {"name", "host", "role"} <= set(node):
            raise ProvisionError(f"{path}: node {index + 1} needs name, host and role and may "
                                 f"have {sorted(known)}; got {sorted(node)}")
        merged = {**defaults, **node}
        merged["python"] = merged.get("python") or None
        merged["key_file"] = _expand(merged.get("key_file"), path.parent)
        merged["known_hosts"] = _expand(merged.get("known_hosts", DEFAULT_KNOWN_HOSTS),
                                        path.parent)
        try:
            hosts.append(Host(**merged))
        except TypeError as error:
            raise ProvisionError(f"{path}: node {index + 1}: {error}") from error
    return Inventory(tuple(hosts))


def parse_ssh_config(text: str) -> dict[str, dict[str, str]]:
    """`vagrant ssh-config` output as {host: {lower-case option: value}}."""
    hosts: dict[str, dict[str, str]] = {}
    current: dict[str, str] | None = None
    for line in text.splitlines():
        words = line.strip().split(None, 1)
        if not words or words[0].startswith("#"):
            continue
        key, value = words[0].lower(), (words[1].strip().strip('"') if len(words) > 1 else "")
        if key == "host":
            current = hosts.setdefault(value, {})
        elif current is not None:
            current.setdefault(key, value)
    return hosts


def vagrant_inventory(directory: Path | str, config_text: str | None = None,
                      dir: str = "/opt/kchaos") -> Inventory:
    """The machines of a Vagrant directory: `n*` are brokers, `z*` ZooKeepers, `c*`
    dedicated KRaft controllers (as vagrant/Vagrantfile names them). Host keys go to
    `<directory>/.vagrant/...`; the service address is left to the node
    (`/etc/kchaos/address`, see harness.control.ssh)."""
    directory = Path(directory).resolve()
    if config_text is None:
        config_text = _vagrant_ssh_config(directory)
    hosts = []
    for name, options in parse_ssh_config(config_text).items():
        role = {"n": "broker", "z": "zookeeper", "c": "controller"}.get(name[:1])
        if role is None:
            continue
        hosts.append(Host(
            name=name, host=options.get("hostname", name), role=role,
            port=int(options.get("port", 22)), user=options.get("user", "vagrant"),
            key_file=options.get("identityfile"),
            known_hosts=str(directory / VAGRANT_KNOWN_HOSTS), dir=dir))
    hosts.sort(key=lambda h: (h.role != "broker", len(h.name), h.name))
    return Inventory(tuple(hosts))


def _vagrant_ssh_config(directory: Path) -> str:
    try:
        done = subprocess.run(["vagrant", "ssh-config"], cwd=directory, capture_output=True,
                              text=True, timeout=300)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ProvisionError(f"vagrant ssh-config in {directory}: {error}") from error
    if done.returncode != 0:
        raise ProvisionError(f"vagrant ssh-config in {directory}: exit {done.returncode}: "
                             f"{done.stderr.strip()[-500:]}")
    return done.stdout


def _expand(path: str | None, base: Path) -> str | None:
    if not path:
        return None
    expanded = Path(os.path.expanduser(path))
    return str(expanded if expanded.is_absolute() else (base / expanded).resolve())
