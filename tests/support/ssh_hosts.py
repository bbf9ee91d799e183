"""Support for the SSH tests (no tests here): real sshd hosts in network namespaces.

`SshHosts(names, directory)` creates, with a per-run prefix `ks<4 hex>`: a bridge
`<prefix>br` at 10.78.<n>.1 on a free /24, and per host a namespace `<prefix>-<name>` with
`eth0` at 10.78.<n>.<10+i> where `/usr/sbin/sshd` runs with its own config and host key,
root login by a generated ed25519 key. `inventory()` writes a TOML inventory for them and
`close()` kills every process in the namespaces by pid (sshd first), then removes the
namespaces, veths and bridge. Root only; the hosts share this machine's filesystem.
"""

from __future__ import annotations

import ipaddress
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

from tests.support import requirements

SSHD = Path("/usr/sbin/sshd")
SSH_KEYGEN = shutil.which("ssh-keygen")


def require_sshd() -> None:
    """Skip unless root with sshd, ssh-keygen and nft available."""
    if os.geteuid() != 0:
        requirements.unmet("needs root for network namespaces")
    if not SSHD.exists() or not SSH_KEYGEN:
        requirements.unmet("needs Debian's openssh-server (/usr/sbin/sshd) and ssh-keygen")
    if not shutil.which("nft"):
        requirements.unmet("needs nftables")


def keygen(path: Path) -> str:
    """An ed25519 key pair at `path`; returns the public key line."""
    subprocess.run([SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "kchaos-test", "-f",
                    str(path)], check=True, capture_output=True)
    return path.with_suffix(".pub").read_text().strip()


def _run(argv: list[str], input: str | None = None, check: bool = True) -> str:
    done = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=60)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {done.stderr.strip()}")
    return done.stdout


def _free_subnet() -> int:
    text = _run(["ip", "-4", "-o", "addr", "show"]) + _run(["ip", "-4", "route", "show",
                                                            "table", "all"])
    used = [ipaddress.ip_network(t, strict=False)
            for t in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", text)]
    start = secrets.randbelow(256)
    for step in range(256):
        subnet = (start + step) % 256
        candidate = ipaddress.ip_network(f"10.78.{subnet}.0/24")
        if not any(candidate.overlaps(net) for net in used if net.prefixlen > 0):
            return subnet
    raise RuntimeError("no free /24 in 10.78.0.0/16")


class SshHosts:
    """sshd hosts in namespaces (see the module docstring); a context manager."""

    def __init__(self, names: list[str], directory: Path) -> None:
        self.names = list(names)
        self.directory = directory
        self.prefix = f"ks{secrets.token_hex(2)}"
        self.subnet = _free_subnet()
        self.sshd: dict[str, subprocess.Popen] = {}
        self.client_key = directory / "id_ed25519"
        self.known_hosts = directory / "known_hosts"
        self.keys_dir = Path(f"/tmp/{self.prefix}-keys")  # readable by a non-root test user
        self.authorized_keys = self.keys_dir / "authorized_keys"
        try:
            self._create()
        except BaseException:
            self.close()
            raise

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def gateway(self) -> str:
        return f"10.78.{self.subnet}.1"

    def netns(self, name: str) -> str:
        return f"{self.prefix}-{name}"

    def address(self, name: str) -> str:
        return f"10.78.{self.subnet}.{10 + self.names.index(name)}"

    def _create(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        Path("/run/sshd").mkdir(exist_ok=True)
        self.keys_dir.mkdir(mode=0o755)
        self.authorized_keys.write_text(keygen(self.client_key) + "\n")
        self.authorized_keys.chmod(0o644)
        _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        _run(["ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        known = []
        for name in self.names:
            ns, veth = self.netns(name), f"{self.prefix}{name}"
            _run(["ip", "netns", "add", ns])
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            _run(["ip", "link", "set", veth, "master", self.bridge, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self.address(name)}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])
            host_key = self.directory / f"host-{name}"
            known.append(f"{self.address(name)} {keygen(host_key)}")
            config = self.directory / f"sshd-{name}.conf"
            config.write_text("\n".join([
                f"ListenAddress {self.address(name)}:22", f"HostKey {host_key}",
                f"PidFile {self.directory / f'sshd-{name}.pid'}",
                f"AuthorizedKeysFile {self.authorized_keys}", "PermitRootLogin prohibit-password",
                "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no",
                "StrictModes no", "Subsystem sftp internal-sftp", "MaxSessions 20",
                "MaxStartups 100", "LogLevel VERBOSE", ""]))
            self.sshd[name] = subprocess.Popen(
                ["ip", "netns", "exec", ns, str(SSHD), "-D", "-e", "-f", str(config)],
                stdout=subprocess.DEVNULL, stderr=open(self.directory / f"sshd-{name}.log", "w"))
        self.known_hosts.write_text("\n".join(known) + "\n")
        deadline = time.monotonic() + 15
        for name in self.names:
            while True:
                try:
                    socket.create_connection((self.address(name), 22), 0.5).close()
                    break
                except OSError:
                    if self.sshd[name].poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"sshd for {name} did not start: " + (
                            self.directory / f"sshd-{name}.log").read_text()) from None
                    time.sleep(0.02)

    def inventory(self, path: Path, roles: dict[str, str] | None = None, user: str = "root",
                  key_file: Path | None = None, python: str | None = None,
                  known_hosts: Path | None = None, dir: str | None = None) -> Path:
        """Write a TOML inventory for the hosts (role default: z* zookeeper, else broker)."""
        roles = roles or {}
        lines = ["[defaults]", f'user = "{user}"', f'key_file = "{key_file or self.client_key}"',
                 f'known_hosts = "{known_hosts or self.known_hosts}"',
                 f'dir = "{dir or self.directory / "nodes"}"']
        if python:
            lines.append(f'python = "{python}"')
        for name in self.names:
            role = roles.get(name, "zookeeper" if name.startswith("z") else "broker")
            lines += ["", "[[node]]", f'name = "{name}"', f'host = "{self.address(name)}"',
                      f'role = "{role}"']
        path.write_text("\n".join(lines) + "\n")
        return path

    def pids(self) -> list[int]:
        """Every process in the hosts' namespaces."""
        pids = []
        for name in self.names:
            out = _run(["ip", "netns", "pids", self.netns(name)], check=False)
            pids += [int(p) for p in out.split()]
        return pids

    def close(self) -> None:
        for popen in self.sshd.values():
            popen.kill()
            popen.wait()
        for pid in self.pids():
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 5
        while self.pids() and time.monotonic() < deadline:
            time.sleep(0.02)
        for name in self.names:
            _run(["ip", "link", "del", f"{self.prefix}{name}"], check=False)
            _run(["ip", "netns", "del", self.netns(name)], check=False)
        _run(["ip", "link", "del", self.bridge], check=False)
        shutil.rmtree(self.keys_dir, ignore_errors=True)

    def leftovers(self) -> list[str]:
        links = _run(["ip", "-o", "link", "show"]) + _run(["ip", "netns", "list"])
        return sorted(set(re.findall(rf"\b{self.prefix}[-a-z0-9]*", links)))

    def __enter__(self) -> SshHosts:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
