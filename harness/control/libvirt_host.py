"""libvirt inside a network namespace of its own: KVM machines whose networks never leave it.

There is no systemd here, and test traffic may only reach loopback or namespaces that we
made, so `up()` creates the namespace `kchaos-libvirt` (only `lo`) and starts `virtlogd`
and `libvirtd` by hand inside it, at the lowest CPU and I/O priority (their qemu processes
inherit both). libvirt's networks are then bridges inside the namespace, its dnsmasq runs
there and the machines' addresses exist only there; the sockets of the daemons are files
(`qemu:///system`), so `virsh` and vagrant-libvirt reach them from anywhere, while
whatever talks to the machines themselves (`vagrant up` waiting for SSH, `kchaos run`)
runs inside the namespace: `exec`.

`<state root>/libvirt-host.json` records the daemons' pids, so `down()` from any process
destroys every domain (and its disks), every network the machines used, then the daemons,
whatever else still runs in the namespace, and the namespace.

    python -m harness.control.libvirt_host up | down | status
    python -m harness.control.libvirt_host exec -- COMMAND [ARG...]
"""

from __future__ import annotations

import argparse
import contextlib
import grp
import os
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness.control.errors import ProvisionError
from harness.control.runstate import default_state_root, read_record, start_time, write_json

__all__ = ["NAMESPACE", "down", "exec_argv", "running", "up"]

NAMESPACE = "kchaos-libvirt"
URI = "qemu:///system"
STATE_FILE = "libvirt-host.json"
LOW_PRIORITY = ("nice", "-n", "19", "ionice", "-c", "3")
KEPT_NETWORKS = ("default",)  # defined by Debian's package, never started here


def state_dir() -> Path:
    return default_state_root() / "libvirt-host"


def running() -> bool:
    """Whether our libvirtd runs (the recorded pid, with its start time)."""
    try:
        record = read_record(state_dir(), STATE_FILE)
    except ProvisionError:
        return False
    daemon = record.get("libvirtd") or {}
    return bool(daemon) and start_time(daemon["pid"]) == daemon["start"]


def up(timeout: float = 60.0) -> None:
    """Create the namespace and start virtlogd and libvirtd in it (nothing if they run)."""
    if running():
        return
    for tool in ("libvirtd", "virtlogd", "virsh", "ip"):
        if shutil.which(tool) is None:
            raise ProvisionError(f"{tool} is missing: make vagrant-bootstrap installs it")
    if _foreign_libvirtd():
        raise ProvisionError("a libvirtd that is not ours runs on this machine "
                             "(/run/libvirtd.pid): stop it first")
    directory = state_dir()
    directory.mkdir(parents=True, exist_ok=True)
    record: dict = {"namespace": NAMESPACE}
    write_json(directory / STATE_FILE, record)
    try:
        _open_kvm_to_its_group()
        if NAMESPACE not in _namespaces():
            _run(["ip", "netns", "add", NAMESPACE])
        _run(["ip", "-n", NAMESPACE, "link", "set", "lo", "up"])
        for daemon in ("virtlogd", "libvirtd"):
            record[daemon] = _start(daemon, directory)
            write_json(directory / STATE_FILE, record)
            if daemon == "virtlogd":
                _wait(lambda: Path("/run/libvirt/virtlogd-sock").exists(), timeout,
                      "virtlogd's socket")
        _wait(lambda: _virsh(["version"], check=False).returncode == 0, timeout,
              f"libvirtd answering on {URI}")
    except BaseException:
        down()
        raise


def down() -> list[str]:
    """Destroy the domains, networks, daemons and namespace; returns what was removed."""
    removed: list[str] = []
    record: dict = {}
    with contextlib.suppress(ProvisionError):
        record = read_record(state_dir(), STATE_FILE)
    if running():
        for domain in _names(["list", "--all", "--name"]):
            _virsh(["destroy", domain], check=False)
            _virsh(["undefine", domain, "--remove-all-storage", "--managed-save",
                    "--snapshots-metadata", "--nvram"], check=False)
            removed.append(f"domain {domain}")
        for network in _names(["net-list", "--all", "--name"]):
            if network in KEPT_NETWORKS:
                continue
            _virsh(["net-destroy", network], check=False)
            _virsh(["net-undefine", network], check=False)
            removed.append(f"network {network}")
    for daemon in ("libvirtd", "virtlogd"):
        info = record.get(daemon)
        if info and start_time(info["pid"]) == info["start"]:
            _stop(info["pid"])
            removed.append(daemon)
    if NAMESPACE in _namespaces():
        for pid in _run(["ip", "netns", "pids", NAMESPACE]).split():
            with contextlib.suppress(ProcessLookupError):
                os.kill(int(pid), signal.SIGKILL)
                removed.append(f"process {pid}")
        _run(["ip", "netns", "delete", NAMESPACE])
        removed.append(f"namespace {NAMESPACE}")
    shutil.rmtree(state_dir(), ignore_errors=True)
    return removed


def exec_argv(argv: Sequence[str]) -> list[str]:
    """`argv` run inside the namespace."""
    return ["ip", "netns", "exec", NAMESPACE, *argv]


def _start(daemon: str, directory: Path) -> dict:
    """Start `daemon` in the foreground of its own session inside the namespace."""
    log = open(directory / f"{daemon}.log", "ab")  # noqa: SIM115 - the daemon keeps it
    with log:
        process = subprocess.Popen(
            exec_argv([*LOW_PRIORITY, daemon, "--pid-file", str(directory / f"{daemon}.pid")]),
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
    time.sleep(0.2)
    if process.poll() is not None:
        raise ProvisionError(f"{daemon} exited {process.returncode}; see "
                             f"{directory / f'{daemon}.log'}")
    return {"pid": process.pid, "start": start_time(process.pid)}


def _stop(pid: int, grace: float = 20.0) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while start_time(pid) is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)


def _open_kvm_to_its_group() -> None:
    """/dev/kvm as udev's rule for Debian makes it (group kvm, mode 0660), so qemu can
    open it as libvirt-qemu; without udev it is root's alone."""
    kvm = Path("/dev/kvm")
    if not kvm.exists():
        raise ProvisionError("/dev/kvm is missing: no KVM on this machine")
    try:
        group = grp.getgrnam("kvm").gr_gid
    except KeyError as error:
        raise ProvisionError("no group kvm (it comes with Debian's qemu-system packages)") \
            from error
    if kvm.stat().st_gid != group or not kvm.stat().st_mode & stat.S_IRGRP:
        os.chown(kvm, -1, group)
        kvm.chmod(0o660)


def _foreign_libvirtd() -> bool:
    try:
        pid = int(Path("/run/libvirtd.pid").read_text().strip())
    except (OSError, ValueError):
        return False
    return start_time(pid) is not None


def _namespaces() -> list[str]:
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line]


def _names(argv: Sequence[str]) -> list[str]:
    done = _virsh(argv, check=False)
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _virsh(argv: Sequence[str], check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(["virsh", "-c", URI, *argv], capture_output=True, text=True,
                          timeout=120)
    if check and done.returncode != 0:
        raise ProvisionError(f"virsh {' '.join(argv)}: {done.stderr.strip()}")
    return done


def _wait(ready, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        if time.monotonic() > deadline:
            raise ProvisionError(f"no {what} within {timeout:g} s")
        time.sleep(0.2)


def _run(argv: Sequence[str]) -> str:
    done = subprocess.run(list(argv), capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ProvisionError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.control.libvirt_host",
                                     description="libvirtd in a network namespace of its own")
    parser.add_argument("action", choices=("up", "down", "status", "exec"))
    parser.add_argument("command", nargs=argparse.REMAINDER,
                        help="exec: the command to run inside the namespace")
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            up()
            print(f"libvirtd runs in network namespace {NAMESPACE} ({URI})")
        elif args.action == "down":
            for line in down():
                print(f"removed {line}")
        elif args.action == "status":
            print("running" if running() else "not running")
            return 0 if running() else 1
        else:
            command = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not command:
                parser.error("exec needs a command")
            if not running():
                raise ProvisionError("libvirtd does not run: `up` first")
            sys.stdout.flush()
            os.execvp("ip", exec_argv(command))
    except ProvisionError as error:
        print(f"libvirt host: {error}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
