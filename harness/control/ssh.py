"""The `ssh` backend: nodes are SSH hosts from an inventory, driven through paramiko.

Each node has one SSH connection and a few long-lived `bash` processes on it (`sudo -n
bash` when the user is not root), each on its own session channel. A command is one line
written to an idle shell: the argv, quoted with `shlex.quote`, runs in a subshell with
stdin from /dev/null (or from its `input`, base64-encoded in the line), then the shell
prints a fresh random marker and the exit status on stdout and the marker on stderr; the
reader splits the streams there. A remote command thus costs one round trip and a fork.

Per run (prefix `kc<4 hex>`), on each node:

    <dir>/<node>/bin/python             wrapper for the node's Python (venv or inventory's)
    <dir>/<node>/runs/<prefix>/pids/<pid>    one file per spawned process: its start time
    nft table inet <prefix>             the node's inbound drops

Spawned processes are double-forked and `setsid` (spawn returns once the process leads its
own group), so they outlive the shell; `running`
and `signal` check the pid file's start time and the network namespace, so a recycled pid
or another node's process (hosts sharing one kernel) is never mistaken for ours.
`<state root>/<prefix>/remote.json` records the inventory (key paths, never keys) and the
owner, so `destroy()` from another process removes the processes, tables and run dirs.
A host without an `address` is reached by its services at the address in the node's
`/etc/kchaos/address` (the Vagrant provisioning writes it), else at its SSH host name.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import secrets
import select
import shlex
import shutil
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import paramiko

from harness.control.errors import (
    CommandError,
    CommandFailed,
    CommandNotFound,
    CommandTimeout,
    PrivilegeError,
    ProvisionError,
    RemoteError,
    SpawnError,
    TransferError,
    UnknownNode,
)
from harness.control.firewall import firewall_rules
from harness.control.inventory import Host, Inventory
from harness.control.remote import Process, Result
from harness.control.runstate import (
    default_state_root,
    owner_record,
    read_record,
    recorded_runs,
    write_json,
)

__all__ = ["SSHRemote", "ssh_runs"]

STATE_FILE = "remote.json"
PREFIX = re.compile(r"^kc[0-9a-f]{4}$")
MAX_SHELLS = 6
ADDRESS_FILE = "/etc/kchaos/address"
SHELL_SETUP = r"""export LC_ALL=C PATH={bin}:$PATH
kc_alive() {{ local f; f=$(sed 's/.*) //' /proc/$1/stat 2>/dev/null) || return 1
  [ -n "$f" ] || return 1; set -- "$1" "$2" $f; case $3 in Z|X|x) return 1;; esac
  [ -z "$2" ] || [ "$2" = "${{22}}" ] || return 1
  [ "$(readlink /proc/$1/ns/net)" = "$(readlink /proc/$$/ns/net)" ]; }}
kc_start() {{ sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f20; }}
kc_leads() {{ local i=0; while [ -e /proc/$1 ] && [ $i -lt 400 ] &&
  [ "$(sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f3)" != "$1" ]; do
  sleep 0.005; i=$((i+1)); done; }}
echo $$"""


class _AcceptNew(paramiko.MissingHostKeyPolicy):
    """Trust on first use, only when asked for: record an unknown key in known_hosts.
    A key that differs from a recorded one is still rejected by paramiko."""

    def __init__(self, known_hosts: Path) -> None:
        self.known_hosts = known_hosts

    def missing_host_key(self, client, hostname, key) -> None:
        client.get_host_keys().add(hostname, key.get_name(), key)
        self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
        with open(self.known_hosts, "a") as out:
            out.write(f"{hostname} {key.get_name()} {key.get_base64()}\n")


class _Shell:
    """One `bash` on a session channel, speaking the marker protocol of the module doc."""

    def __init__(self, client: paramiko.SSHClient, host: Host) -> None:
        self.channel = client.get_transport().open_session()
        self.channel.exec_command("bash --noprofile --norc" if host.user == "root"
                                  else "sudo -n bash --noprofile --norc")
        try:
            exit, out, err = self.run(SHELL_SETUP.format(bin=_q(f"{host.home}/bin")), 30)
        except ConnectionError as error:
            exit, out, err = -1, "", str(error)
        if exit != 0 or not out.strip().isdigit():
            self.close()
            raise PrivilegeError(f"{host.name}: no shell as root ({host.user}"
                                 f"{'' if host.user == 'root' else ' via sudo -n'}): "
                                 f"{err.strip() or out.strip()}")
        self.pid = int(out)

    def run(self, script: str, timeout: float) -> tuple[int, str, str] | None:
        """Run one line; None on timeout (the command may still run)."""
        token = secrets.token_hex(8)
        self.channel.sendall((f"{script}\nprintf '\\n%s %d\\n' {token} $?; "
                              f"printf '\\n%s\\n' {token} >&2\n").encode())
        return self._read(token, time.monotonic() + timeout)

    def _read(self, token: str, deadline: float) -> tuple[int, str, str] | None:
        out, err = bytearray(), bytearray()
        status = re.compile(rb"\n" + token.encode() + rb" (\d+)\n$")
        err_end = b"\n" + token.encode() + b"\n"
        while True:
            while self.channel.recv_ready():
                out += self.channel.recv(65536)
            while self.channel.recv_stderr_ready():
                err += self.channel.recv_stderr(65536)
            found = status.search(out)
            if found and err.endswith(err_end):
                text = out[:found.start()].decode(errors="replace")
                return (int(found.group(1)), text,
                        err[:-len(err_end)].decode(errors="replace"))
            if self.channel.exit_status_ready() and not self.channel.recv_ready() \
                    and not self.channel.recv_stderr_ready():
                raise ConnectionError(f"shell ended: {err.decode(errors='replace')[-300:]}")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            select.select([self.channel], [], [], min(remaining, 1.0))

    def drain(self, token_wait: float) -> bool:
        """After a timeout: wait for the interrupted command's markers; False if none."""
        return self.run(":", token_wait) is not None

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.channel.close()


class _Node:
    """Connection, shells and SFTP of one host; thread-safe."""

    def __init__(self, host: Host, accept_new: bool) -> None:
        self.host = host
        self.accept_new = accept_new
        self.lock = threading.Lock()
        self.slots = threading.BoundedSemaphore(MAX_SHELLS)
        self.client: paramiko.SSHClient | None = None
        self.idle: list[_Shell] = []
        self.sftp: paramiko.SFTPClient | None = None
        self.sftp_lock = threading.Lock()

    def connect(self) -> paramiko.SSHClient:
        with self.lock:
            transport = self.client.get_transport() if self.client else None
            if transport is not None and transport.is_active():
                return self.client
            self._close_locked()
            self.client = _connect(self.host, self.accept_new)
            return self.client

    def shell(self) -> _Shell:
        client = self.connect()
        with self.lock:
            if self.idle:
                return self.idle.pop()
        return _Shell(client, self.host)

    def release(self, shell: _Shell) -> None:
        with self.lock:
            self.idle.append(shell)

    def close(self) -> None:
        with self.lock:
            self._close_locked()

    def _close_locked(self) -> None:
        for shell in self.idle:
            shell.close()
        self.idle.clear()
        if self.sftp is not None:
            with contextlib.suppress(Exception):
                self.sftp.close()
            self.sftp = None
        if self.client is not None:
            self.client.close()
            self.client = None


def _connect(host: Host, accept_new: bool) -> paramiko.SSHClient:
    """An authenticated client; host key checked against `host.known_hosts`."""
    client = paramiko.SSHClient()
    known_hosts = Path(os.path.expanduser(host.known_hosts))
    try:
        if known_hosts.exists():
            client.load_host_keys(str(known_hosts))
        client.set_missing_host_key_policy(_AcceptNew(known_hosts) if accept_new
                                           else paramiko.RejectPolicy())
        client.connect(host.host, port=host.port, username=host.user,
                       key_filename=host.key_file, look_for_keys=host.key_file is None,
                       allow_agent=host.key_file is None, timeout=10, banner_timeout=10,
                       auth_timeout=10)
    except paramiko.BadHostKeyException as error:
        client.close()
        raise ProvisionError(f"{host.name}: host key of {host.host}:{host.port} does not match "
                             f"{known_hosts}: {error.key.get_name()}") from None
    except paramiko.SSHException as error:
        client.close()
        hint = (" (unknown host key: add it to known_hosts or pass --accept-new-host-keys)"
                if "not found in known_hosts" in str(error) else "")
        raise ProvisionError(f"{host.name}: ssh {host.user}@{host.host}:{host.port}: "
                             f"{type(error).__name__}: {error}{hint}") from None
    except (OSError, ValueError) as error:
        client.close()
        raise ProvisionError(f"{host.name}: ssh {host.user}@{host.host}:{host.port}: "
                             f"{error}") from None
    return client


class SSHRemote:
    """`Remote` over SSH hosts (see the module docstring)."""

    python = "python"  # the node's wrapper in <dir>/<node>/bin, first on PATH

    def __init__(self, inventory: Inventory, prefix: str, state_dir: Path,
                 accept_new_host_keys: bool = False,
                 addresses: Mapping[str, str] | None = None) -> None:
        self.inventory = inventory
        self.prefix = prefix
        self.state_dir = state_dir
        self.accept_new_host_keys = accept_new_host_keys
        self._nodes = {h.name: _Node(h, accept_new_host_keys) for h in inventory.hosts}
        self._addresses = dict(addresses or {})

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    def provision(cls, inventory: Inventory, state_root: Path | None = None,
                  accept_new_host_keys: bool = False, **options: Any) -> SSHRemote:
        """Record a new run, connect to every host, prepare its directories, Python wrapper
        and nft table; on failure, remove what was made. `options` go to a subclass."""
        root = state_root or default_state_root()
        root.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            prefix = f"kc{secrets.token_hex(2)}"
            with contextlib.suppress(FileExistsError):
                (root / prefix).mkdir()
                break
        else:
            raise ProvisionError(f"no free run prefix under {root}")
        remote = cls(inventory, prefix, root / prefix, accept_new_host_keys, **options)
        try:
            remote._save(owner=owner_record())
            errors = _parallel(remote.nodes, remote._prepare)
            if errors:
                raise errors[0]
            remote._save(owner=owner_record())
        except BaseException:
            with contextlib.suppress(RemoteError):
                remote.destroy()
            raise
        return remote

    @classmethod
    def attach(cls, state_dir: Path) -> SSHRemote:
        data = read_record(state_dir, STATE_FILE)
        return cls(Inventory.from_json(data["inventory"]), data["prefix"], state_dir,
                   data["accept_new_host_keys"], data.get("addresses"))

    def detach(self) -> None:
        """Let the run outlive this process (`kchaos cluster up`)."""
        self._save(owner=None)
        self.close()

    def close(self) -> None:
        for node in self._nodes.values():
            node.close()

    def destroy(self) -> None:
        """Kill the run's processes on every node, remove its nft table and run directory,
        then the state directory. Idempotent; unreachable hosts are reported at the end."""
        errors = _parallel(self.nodes, self._teardown)
        self.close()
        shutil.rmtree(self.state_dir, ignore_errors=True)
        if errors:
            raise ProvisionError(f"run {self.prefix}: teardown incomplete: "
                                 + "; ".join(str(e) for e in errors))

    def run_dir(self, node: str) -> str:
        return f"{self._host(node).home}/runs/{self.prefix}"

    def _prepare(self, node: str) -> None:
        host = self._host(node)
        python = host.python or f"{host.home}/venv/bin/python"
        wrapper = f'#!/bin/sh\nexec {shlex.quote(python)} "$@"\n'
        script = (f"mkdir -p {_q(self.run_dir(node))}/pids {_q(host.home)}/bin && "
                  f"printf %s {_q(wrapper)} > {_q(host.home)}/bin/python && "
                  f"chmod 755 {_q(host.home)}/bin/python && "
                  f"{{ cat {ADDRESS_FILE} 2>/dev/null || true; }}")
        found = self._script(node, script).out.strip()
        self._addresses[node] = host.address or found or host.host
        self.exec(node, ["nft", "-f", "-"], input=(
            f"table inet {self.prefix} {{\n  chain input {{\n"
            "    type filter hook input priority filter; policy accept;\n  }\n}\n"))

    def _teardown(self, node: str) -> None:
        pids = _q(f"{self.run_dir(node)}/pids")
        self._script(node, (
            f"for f in {pids}/*; do [ -e \"$f\" ] || continue; p=${{f##*/}}; "
            f"kc_alive \"$p\" \"$(cat \"$f\")\" && kill -KILL -- -\"$p\" 2>/dev/null; "
            f"kc_alive \"$p\" \"$(cat \"$f\")\" && kill -KILL \"$p\" 2>/dev/null; done; "
            f"nft delete table inet {self.prefix} 2>/dev/null; "
            f"rm -rf {_q(self.run_dir(node))}; true"), timeout=60)

    def _save(self, owner: Mapping | None) -> None:
        data = {"backend": "ssh", "prefix": self.prefix,
                "inventory": self.inventory.to_json(), "addresses": self._addresses,
                "accept_new_host_keys": self.accept_new_host_keys, "owner": owner,
                **self._record_options()}
        write_json(self.state_dir / STATE_FILE, data)

    def _record_options(self) -> dict[str, Any]:
        """What a subclass adds to the run's record."""
        return {}

    # -- Remote ---------------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.inventory.names

    def address(self, node: str) -> str:
        host = self._host(node)
        return self._addresses.get(node) or host.address or host.host

    def exec(self, node: str, argv: Sequence[str], *, check: bool = True,
             timeout: float = 60.0, input: str | None = None) -> Result:
        if not argv:
            raise ValueError("empty argv")
        command = "( " + shlex.join(argv) + " )"
        if input is None:
            script = f"{command} </dev/null"
        else:
            encoded = base64.b64encode(input.encode()).decode()
            script = f"printf %s {encoded} | base64 -d | {command}"
        result = self._script(node, script, timeout, argv)
        if result.exit == 127 and re.search(r"(command not found|No such file or directory)\s*$",
                                            result.err):
            raise CommandNotFound(node, argv, result.err.strip())
        if check and result.exit != 0:
            raise CommandFailed(node, argv, *result)
        return result

    def spawn(self, node: str, argv: Sequence[str], log: str, *,
              env: Mapping[str, str] | None = None, cwd: str | None = None) -> Process:
        """As `Remote.spawn`; `env` is added to the node's environment."""
        pids = f"{self.run_dir(node)}/pids"
        assignments = " ".join(_q(f"{k}={v}") for k, v in (env or {}).items())
        inner = (f"cd {_q(cwd or '/')} && exec env {assignments} setsid {shlex.join(argv)}")
        script = (f"mkdir -p {_q(os.path.dirname(log) or '/')} {_q(pids)} && "
                  f"p=$( ( ( {inner} ) >>{_q(log)} 2>&1 </dev/null & echo $! ) ) && "
                  f"kc_start $p > {_q(pids)}/$p; kc_leads $p; echo $p")
        try:
            exit, out, err = self._script(node, script, 30, argv)
        except CommandError as error:
            raise SpawnError(f"{node}: cannot start {argv[0]}: {error}") from error
        if exit != 0 or not out.strip().isdigit():
            raise SpawnError(f"{node}: cannot start {argv[0]}: exit {exit}: {err.strip()}")
        return Process(node, int(out), tuple(argv), log)

    def signal(self, node: str, pid: int, sig: int) -> bool:
        check = self._alive_check(node, pid)
        done = self._script(node, f"{check} && {{ kill -{int(sig)} -- -{int(pid)} 2>/dev/null "
                                  f"|| kill -{int(sig)} {int(pid)}; }}")
        return done.exit == 0

    def running(self, node: str, pid: int) -> bool:
        return self._script(node, self._alive_check(node, pid)).exit == 0

    def upload(self, node: str, local: Path | str, remote: str) -> None:
        host = self._host(node)
        staging = remote if host.user == "root" else f"/tmp/kchaos-upload-{secrets.token_hex(8)}"
        self._script(node, f"mkdir -p {_q(os.path.dirname(remote) or '/')}", operation="upload")
        self._sftp(node, lambda sftp: sftp.put(str(local), staging), f"upload {local}")
        if staging != remote:
            self._script(node, f"mv -f {_q(staging)} {_q(remote)}", operation="upload")

    def download(self, node: str, remote: str, local: Path | str) -> None:
        host = self._host(node)
        Path(local).parent.mkdir(parents=True, exist_ok=True)
        if host.user == "root":
            self._sftp(node, lambda sftp: sftp.get(remote, str(local)), f"download {remote}")
            return
        staging = f"/tmp/kchaos-download-{secrets.token_hex(8)}"
        self._script(node, f"cp {_q(remote)} {_q(staging)} && chmod 644 {_q(staging)}",
                     operation="download")
        try:
            self._sftp(node, lambda sftp: sftp.get(staging, str(local)), f"download {remote}")
        finally:
            self._script(node, f"rm -f {_q(staging)}", operation="download")

    def firewall(self, node: str, drop_from: Sequence[str] = (),
                 loss_from: Mapping[str, float] | None = None) -> None:
        for other in [*drop_from, *(loss_from or {})]:
            self._host(other)
        self.exec(node, ["nft", "-f", "-"],
                  input=firewall_rules(self.prefix, drop_from, dict(loss_from or {}),
                                       self.address))

    # -- plumbing ---------------------------------------------------------------------------

    def _host(self, node: str) -> Host:
        try:
            return self._nodes[node].host
        except KeyError:
            raise UnknownNode(node) from None

    def _alive_check(self, node: str, pid: int) -> str:
        pid_file = _q(f"{self.run_dir(node)}/pids/{int(pid)}")
        return f"kc_alive {int(pid)} \"$(cat {pid_file} 2>/dev/null)\""

    def _script(self, node: str, script: str, timeout: float = 60.0,
                argv: Sequence[str] | None = None, operation: str | None = None) -> Result:
        """Run a shell line on a root shell of `node`; errors become RemoteErrors
        (TransferError when `operation` names a file transfer)."""
        self._host(node)
        state = self._nodes[node]
        argv = list(argv or ["sh", "-c", script])
        try:
            with state.slots:
                shell = state.shell()
                try:
                    result = shell.run(script, timeout)
                except BaseException:
                    shell.close()
                    raise
                if result is None:
                    self._interrupt(state, shell)
                    raise CommandTimeout(node, argv, timeout)
                state.release(shell)
        except (paramiko.SSHException, OSError, EOFError) as error:
            if operation:
                raise TransferError(f"{node}: {operation}: {error}") from error
            raise CommandError(node, argv, f"ssh: {type(error).__name__}: {error}") from error
        except RemoteError as error:
            if operation and not isinstance(error, TransferError):
                raise TransferError(f"{node}: {operation}: {error}") from error
            raise
        exit, out, err = result
        if operation and exit != 0:
            raise TransferError(f"{node}: {operation}: exit {exit}: {err.strip()}")
        return Result(exit, out, err)

    def _interrupt(self, state: _Node, shell: _Shell) -> None:
        """Kill the shell's running command; keep the shell if it recovers."""
        try:
            client = state.connect()
            channel = client.get_transport().open_session()
            sudo = "" if state.host.user == "root" else "sudo -n "
            channel.exec_command(f"{sudo}pkill -KILL -P {shell.pid}")
            channel.recv_exit_status()
            channel.close()
            if shell.drain(10):
                state.release(shell)
                return
        except (paramiko.SSHException, OSError, ConnectionError):
            pass
        shell.close()

    def _sftp(self, node: str, action, what: str) -> None:
        state = self._nodes[node]
        try:
            client = state.connect()
            with state.sftp_lock:
                if state.sftp is None or state.sftp.get_channel().closed:
                    state.sftp = client.open_sftp()
                action(state.sftp)
        except (paramiko.SSHException, OSError) as error:
            raise TransferError(f"{node}: {what}: {error}") from error


def ssh_runs(state_root: Path, include_owned: bool = False) -> list[str]:
    """SSH runs recorded under `state_root`; without `include_owned`, only those whose
    owner is gone or that were detached."""
    return recorded_runs(state_root, STATE_FILE, PREFIX, include_owned)


def _q(text: str) -> str:
    return shlex.quote(text)


def _parallel(nodes: Sequence[str], action) -> list[Exception]:
    errors: list[Exception] = []

    def run(node: str) -> None:
        try:
            action(node)
        except Exception as error:  # collected and re-raised by the caller
            errors.append(error)

    threads = [threading.Thread(target=run, args=(n,), daemon=True) for n in nodes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return errors
