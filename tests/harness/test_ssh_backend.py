"""The ssh backend against real sshd hosts in network namespaces: persistent shells, quoting,
transfers, processes, firewall, host keys, sudo, timeouts and teardown. Needs root."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.control import (
    CommandFailed,
    CommandNotFound,
    CommandTimeout,
    PrivilegeError,
    ProvisionError,
    TransferError,
    UnknownNode,
)
from harness.control.inventory import load_inventory
from harness.control.ssh import SSHRemote, ssh_runs
from tests.support import requirements
from tests.support.ssh_hosts import SshHosts, require_sshd

pytestmark = pytest.mark.cluster

HOSTILE = ["it's", 'say "hi"', "a; touch {canary}", "$(touch {canary})", "`touch {canary}`",
           "line1\nline2\n", "back\\slash", "*", "-n", "", "  spaced  ", "$HOME", "ünï",
           "'; exit 3; '", "a|b&c>d<e"]
LISTENER = ("import socket\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,"
            "socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',7000));s.listen(64)\n"
            "while True:\n c,_=s.accept();c.close()\n")
PROBE = ("import socket,sys,json\ndef ok(a):\n try:\n  socket.create_connection((a,7000),0.4)"
         ".close();return True\n except OSError:\n  return False\n"
         "print(json.dumps({a: ok(a) for a in sys.argv[1:]}))\n")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    require_sshd()
    with SshHosts(["n1", "n2", "n3"], tmp_path_factory.mktemp("sshd")) as made:
        yield made
    assert made.leftovers() == []


@pytest.fixture
def remote(hosts, tmp_path):
    inventory = load_inventory(hosts.inventory(tmp_path / "inventory.toml"))
    made = SSHRemote.provision(inventory, tmp_path / "state")
    yield made
    made.destroy()
    assert not (tmp_path / "state" / made.prefix).exists()


def test_exec_over_a_persistent_shell(remote, hosts):
    assert remote.nodes == ("n1", "n2", "n3")
    assert remote.address("n2") == hosts.address("n2")
    exit, out, err = remote.exec("n1", ["sh", "-c", "echo out; echo err >&2; exit 0"])
    assert (exit, out, err) == (0, "out\n", "err\n")
    assert remote.exec("n1", ["printf", "no newline"]).out == "no newline"
    with pytest.raises(CommandFailed) as failed:
        remote.exec("n1", ["sh", "-c", "echo oops >&2; exit 3"])
    assert failed.value.exit == 3 and failed.value.err == "oops\n"
    assert remote.exec("n1", ["false"], check=False).exit == 1
    with pytest.raises(CommandNotFound):
        remote.exec("n1", ["no-such-program-kchaos"])
    with pytest.raises(UnknownNode):
        remote.exec("n9", ["true"])
    assert remote.exec("n2", ["cat"], input="a\nb'c\n\x00?").out == "a\nb'c\n\x00?"
    assert remote.exec("n2", ["cat"]).out == ""
    big = remote.exec("n3", ["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; "
                                         "head -c 200000 /dev/zero | tr '\\0' y >&2"])
    assert len(big.out) == 3_000_000 and len(big.err) == 200_000
    namespace = remote.exec("n3", ["readlink", "/proc/self/ns/net"]).out
    assert namespace == subprocess.run(["ip", "netns", "exec", hosts.netns("n3"), "readlink",
                                        "/proc/self/ns/net"], capture_output=True,
                                       text=True).stdout

    parents, seconds = set(), []
    for _ in range(50):
        started = time.perf_counter()
        parents.add(remote.exec("n1", ["sh", "-c", "echo $PPID"]).out)
        seconds.append(time.perf_counter() - started)
    assert len(parents) == 1, "every command runs in the same long-lived shell"
    assert statistics.median(seconds) < 0.1


def test_hostile_strings_arrive_literally(remote, tmp_path):
    canary = tmp_path / "canary"
    values = [v.format(canary=canary) for v in HOSTILE]
    out = remote.exec("n1", ["printf", "%s\\0", *values]).out
    assert out.split("\0")[:-1] == values
    log = tmp_path / "dir with 'quote'" / "spawn;$(x).log"
    process = remote.spawn("n2", [sys.executable, "-c",
                                  "import json,sys,os;print(json.dumps([sys.argv[1:],"
                                  "os.environ['KC_VALUE'],os.getcwd()]),flush=True)", *values],
                           str(log), env={"KC_VALUE": values[3]}, cwd=str(tmp_path))
    deadline = time.monotonic() + 10
    while remote.running("n2", process.pid) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert json.loads(log.read_text()) == [values, values[3], str(tmp_path)]
    target = tmp_path / "up; $(touch canary) 'x'.txt"
    (tmp_path / "src").write_text("payload")
    remote.upload("n3", tmp_path / "src", str(target))
    assert target.read_text() == "payload"
    assert not canary.exists()


def test_upload_and_download(remote, tmp_path):
    source = tmp_path / "blob"
    source.write_bytes(bytes(range(256)) * 1000)
    remote.upload("n1", source, str(tmp_path / "node" / "deep" / "blob"))
    remote.download("n1", str(tmp_path / "node" / "deep" / "blob"), tmp_path / "back" / "b")
    assert (tmp_path / "back" / "b").read_bytes() == source.read_bytes()
    with pytest.raises(TransferError):
        remote.download("n1", str(tmp_path / "missing"), tmp_path / "x")
    with pytest.raises(TransferError):
        remote.upload("n1", tmp_path / "missing", str(tmp_path / "y"))


def test_spawn_signal_running_and_timeout(remote, tmp_path):
    process = remote.spawn("n2", ["sleep", "60"], str(tmp_path / "sleep.log"))
    assert remote.running("n2", process.pid)
    assert not remote.running("n1", process.pid), "another node's process is not ours"
    assert os.getpgid(process.pid) == process.pid, "setsid: it leads its own group"
    assert remote.signal("n2", process.pid, signal.SIGSTOP)
    deadline = time.monotonic() + 5
    while _state(process.pid) != "T":
        assert time.monotonic() < deadline, "SIGSTOP did not stop it"
        time.sleep(0.01)
    assert remote.signal("n2", process.pid, signal.SIGCONT)
    assert remote.signal("n2", process.pid, signal.SIGKILL)
    deadline = time.monotonic() + 5
    while remote.running("n2", process.pid) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert not remote.running("n2", process.pid)
    assert not remote.signal("n2", process.pid, signal.SIGKILL)

    started = time.monotonic()
    with pytest.raises(CommandTimeout):
        remote.exec("n1", ["sleep", "30"], timeout=0.5)
    assert remote.exec("n1", ["echo", "after"]).out == "after\n"
    assert time.monotonic() - started < 10
    leftover = subprocess.run(["pgrep", "-f", "^sleep 30$"], capture_output=True, text=True)
    assert not any(_netns(int(pid)) == _netns_of(remote, "n1")
                   for pid in leftover.stdout.split())


def test_firewall_drops_by_source_and_heals(remote, tmp_path):
    for node in remote.nodes:
        remote.spawn(node, [sys.executable, "-c", LISTENER], str(tmp_path / f"{node}.log"))
    deadline = time.monotonic() + 10
    for node in remote.nodes:
        while True:
            try:
                socket.create_connection((remote.address(node), 7000), 0.5).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.02)
    assert all(_reachability(remote).values())
    remote.firewall("n2", drop_from=["n1"])
    seen = _reachability(remote)
    assert not seen[("n1", "n2")] and not seen[("n2", "n1")]
    assert seen[("n3", "n2")] and seen[("n1", "n3")]
    assert remote.exec("n2", ["true"]).exit == 0, "the controlling host still reaches n2"
    remote.firewall("n2", loss_from={"n3": 1.0})
    seen = _reachability(remote)
    assert seen[("n1", "n2")] and not seen[("n3", "n2")]
    with pytest.raises(UnknownNode):
        remote.firewall("n2", drop_from=["n9"])
    remote.firewall("n2")
    assert all(_reachability(remote).values())


def test_destroy_from_another_process_removes_processes_tables_and_run_dirs(hosts, tmp_path):
    inventory = load_inventory(hosts.inventory(tmp_path / "inventory.toml"))
    remote = SSHRemote.provision(inventory, tmp_path / "state")
    process = remote.spawn("n1", ["sleep", "300"], str(tmp_path / "s.log"))
    remote.detach()
    assert ssh_runs(tmp_path / "state") == [remote.prefix]
    attached = SSHRemote.attach(tmp_path / "state" / remote.prefix)
    assert attached.address("n3") == hosts.address("n3")
    assert attached.running("n1", process.pid)
    run_dir = attached.run_dir("n1")
    attached.destroy()
    assert not _alive(process.pid)
    assert not Path(run_dir).exists()
    tables = subprocess.run(["ip", "netns", "exec", hosts.netns("n1"), "nft", "list", "tables"],
                            capture_output=True, text=True).stdout
    assert remote.prefix not in tables
    assert ssh_runs(tmp_path / "state", include_owned=True) == []
    attached.destroy()


def test_host_keys_are_checked_and_new_ones_accepted_only_on_request(hosts, tmp_path):
    empty = tmp_path / "known_hosts"
    inventory = load_inventory(hosts.inventory(tmp_path / "i.toml", known_hosts=empty))
    with pytest.raises(ProvisionError, match="known_hosts"):
        SSHRemote.provision(inventory, tmp_path / "state")
    assert not empty.exists()
    remote = SSHRemote.provision(inventory, tmp_path / "state", accept_new_host_keys=True)
    try:
        assert remote.exec("n1", ["true"]).exit == 0
    finally:
        remote.destroy()
    recorded = empty.read_text()
    assert all(hosts.address(n) in recorded for n in hosts.names)
    SSHRemote.provision(inventory, tmp_path / "state").destroy()

    wrong = tmp_path / "wrong_known_hosts"
    other = (hosts.directory / "host-n2.pub").read_text().split()
    wrong.write_text(f"{hosts.address('n1')} {other[0]} {other[1]}\n")
    inventory = load_inventory(hosts.inventory(tmp_path / "w.toml", known_hosts=wrong))
    with pytest.raises(ProvisionError, match="does not match"):
        SSHRemote.provision(inventory.select(["n1"]), tmp_path / "state",
                            accept_new_host_keys=True)
    assert not any(p.name.startswith("kc") for p in (tmp_path / "state").iterdir())


def test_secrets_stay_out_of_state(remote, hosts, tmp_path):
    key = hosts.client_key.read_text()
    state = (remote.state_dir / "remote.json").read_text()
    body = "".join(key.splitlines()[1:-1])
    assert body[:40] not in state and "PRIVATE KEY" not in state
    assert str(hosts.client_key) in state


def test_sudo_for_a_user_that_is_not_root(hosts, tmp_path):
    if not shutil.which("sudo"):
        requirements.unmet("sudo is not installed (Debian package sudo)")
    if not Path("/etc/sudoers").exists():
        requirements.unmet("no /etc/sudoers (Debian package sudo)")
    user = f"kcs{os.getpid() % 100000}"
    sudoers = Path(f"/etc/sudoers.d/{user}")
    subprocess.run(["useradd", "--no-create-home", "--shell", "/bin/bash", user], check=True)
    try:
        subprocess.run(["usermod", "-p", "*", user], check=True)
        inventory = load_inventory(hosts.inventory(tmp_path / "i.toml", user=user))
        with pytest.raises(PrivilegeError):
            SSHRemote.provision(inventory.select(["n1"]), tmp_path / "state")
        sudoers.parent.mkdir(exist_ok=True)
        sudoers.write_text(f"{user} ALL=(ALL) NOPASSWD: ALL\n")
        sudoers.chmod(0o440)
        remote = SSHRemote.provision(inventory, tmp_path / "state")
        try:
            assert remote.exec("n1", ["id", "-u"]).out == "0\n"
            assert remote.exec("n1", ["sh", "-c", "echo $SUDO_USER"]).out == f"{user}\n"
            private = tmp_path / "root-only"
            private.mkdir(mode=0o700)
            (tmp_path / "src").write_text("secret")
            remote.upload("n2", tmp_path / "src", str(private / "f"))
            remote.download("n2", str(private / "f"), tmp_path / "back")
            assert (tmp_path / "back").read_text() == "secret"
            process = remote.spawn("n3", ["sleep", "60"], str(private / "s.log"))
            assert remote.running("n3", process.pid)
            assert remote.signal("n3", process.pid, signal.SIGKILL)
        finally:
            remote.destroy()
    finally:
        sudoers.unlink(missing_ok=True)
        deadline = time.monotonic() + 10
        while subprocess.run(["userdel", user], capture_output=True).returncode == 8:
            subprocess.run(["pkill", "-KILL", "-u", user], capture_output=True)
            assert time.monotonic() < deadline, f"could not remove test user {user}"
            time.sleep(0.1)
    assert subprocess.run(["id", user], capture_output=True).returncode != 0


def _reachability(remote: SSHRemote) -> dict[tuple[str, str], bool]:
    result = {}
    for source in remote.nodes:
        targets = [n for n in remote.nodes if n != source]
        answers = json.loads(remote.exec(source, [sys.executable, "-c", PROBE,
                                                  *[remote.address(t) for t in targets]]).out)
        for target in targets:
            result[(source, target)] = answers[remote.address(target)]
    return result


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def _alive(pid: int) -> bool:
    try:
        return _state(pid) not in "ZX"
    except OSError:
        return False


def _netns(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


def _netns_of(remote: SSHRemote, node: str) -> str:
    return remote.exec(node, ["readlink", "/proc/self/ns/net"]).out.strip()
