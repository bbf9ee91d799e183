"""The docker backend against a dockerd of the test's own, with a tiny imported image.

No network beyond the containers' own bridge, no registry, no debootstrap: the image is
this machine's busybox-static and nft, imported in well under a second.
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path

import pytest

from harness.control import CommandFailed, CommandNotFound, CommandTimeout, TransferError
from harness.control.docker import (
    DockerRemote,
    PrivateDaemon,
    destroy_run,
    run_prefixes,
)
from harness.control.docker_image import RUN_LABEL, tiny_image
from harness.control.errors import CommandError, UnknownNode
from harness.control.firewall import firewall_rules
from tests.support import requirements

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]
PORT = 9000


@pytest.fixture(scope="module")
def daemon(tmp_path_factory):
    if shutil.which("dockerd") is None or shutil.which("busybox") is None:
        requirements.unmet("needs dockerd (docker.io) and busybox-static")
    private = PrivateDaemon(tmp_path_factory.mktemp("dockerd"))
    client = private.start()
    try:
        yield private, client
    finally:
        private.stop()


@pytest.fixture(scope="module")
def image(daemon):
    return tiny_image(daemon[1], "kchaos/tiny:smoke", {})


@pytest.fixture(scope="module")
def remote(daemon, image, tmp_path_factory):
    remote = DockerRemote.provision(["n1", "n2", "n3"], base_url=daemon[0].base_url,
                                    image=image, state_root=tmp_path_factory.mktemp("state"))
    try:
        yield remote
    finally:
        remote.destroy()


def test_firewall_rules_are_one_replacement_of_the_chain():
    assert firewall_rules("kd0001", [], {}) == "flush chain inet kd0001 input\n"
    script = firewall_rules("kd0001", ["10.0.0.3", "10.0.0.2"], {"10.0.0.4": 0.25,
                                                                 "10.0.0.5": 1.0})
    assert script.splitlines() == [
        "flush chain inet kd0001 input",
        "add rule inet kd0001 input ip saddr { 10.0.0.2, 10.0.0.3, 10.0.0.5 } drop",
        "add rule inet kd0001 input ip saddr 10.0.0.4 numgen random mod 10000 < 2500 drop",
    ]
    with pytest.raises(ValueError):
        firewall_rules("kd0001", [], {"10.0.0.4": 1.5})


def test_the_daemon_is_our_own(daemon):
    private, client = daemon
    info = client.info()
    assert info["DockerRootDir"] == f"{private.directory}/data"
    assert client.version()["ApiVersion"]
    assert private.process is not None and private.process.poll() is None


def test_nodes_have_fixed_addresses_and_their_names(remote, daemon):
    client = daemon[1]
    for index, node in enumerate(remote.nodes):
        address = remote.address(node)
        assert address == f"10.79.{remote.network.subnet}.{10 + index}"
        details = client.api.inspect_container(remote.network.container(node))
        assert details["NetworkSettings"]["Networks"][remote.network.name]["IPAddress"] \
            == address
        assert "NET_ADMIN" in details["HostConfig"]["CapAdd"]
        assert details["Config"]["Labels"][RUN_LABEL] == remote.network.prefix
        assert remote.exec(node, ["cat", "/etc/hostname"]).out.strip() == node
    with pytest.raises(UnknownNode):
        remote.exec("zz", ["true"])


def test_exec_passes_argv_and_stdin_literally(remote):
    hostile = ["a'b", '"q"', "; rm -rf /", "$(id)", "`id`", "x y", "*"]
    assert remote.exec("n1", ["echo", *hostile]).out == " ".join(hostile) + "\n"
    assert remote.exec("n1", ["cat"], input="line 1\n$HOME\n").out == "line 1\n$HOME\n"
    exit, out, err = remote.exec("n1", ["sh", "-c", "echo out; echo err >&2; exit 3"],
                                 check=False)
    assert (exit, out, err) == (3, "out\n", "err\n")


def test_exec_errors(remote):
    with pytest.raises(CommandFailed) as failed:
        remote.exec("n1", ["sh", "-c", "echo oops >&2; exit 4"])
    assert failed.value.exit == 4 and failed.value.err == "oops\n"
    with pytest.raises(CommandNotFound):
        remote.exec("n1", ["no-such-program"])
    started = time.monotonic()
    with pytest.raises(CommandTimeout):
        remote.exec("n1", ["sleep", "30"], timeout=1)
    assert time.monotonic() - started < 10
    assert remote.exec("n1", ["ps"]).out.count("sleep 30") == 0


def _reply(remote: DockerRemote, source: str, target: str) -> str:
    """What the server on `target` answers a connection from `source` ("" on no answer)."""
    return remote.exec(source, ["sh", "-c", f"echo hi | nc -w 2 {remote.address(target)} "
                                            f"{PORT}"], check=False, timeout=10).out


def test_firewall_is_effective_between_containers(remote):
    server = remote.spawn("n2", ["nc", "-ll", "-p", str(PORT), "-e", "echo", "pong"],
                          "/var/log/kchaos/nc.log")
    try:
        deadline = time.monotonic() + 10
        while _reply(remote, "n1", "n2") != "pong\n":
            assert time.monotonic() < deadline, "server never answered"
            time.sleep(0.1)
        remote.firewall("n2", drop_from=["n1"])
        table = remote.exec("n2", ["nft", "list", "table", "inet", remote.network.table]).out
        assert remote.address("n1") in table
        assert _reply(remote, "n1", "n2") == ""
        assert _reply(remote, "n3", "n2") == "pong\n"
        remote.firewall("n2", loss_from={"n3": 1.0})
        assert _reply(remote, "n3", "n2") == ""
        assert _reply(remote, "n1", "n2") == "pong\n"
        remote.firewall("n2")
        assert _reply(remote, "n3", "n2") == "pong\n"
    finally:
        remote.firewall("n2")
        remote.signal("n2", server.pid, signal.SIGKILL)


def test_spawn_signal_and_running(remote, tmp_path):
    sleeper = remote.spawn("n3", ["sleep", "1000"], "/var/log/kchaos/sleep.log")
    assert remote.running("n3", sleeper.pid)
    assert not remote.running("n1", sleeper.pid) or sleeper.pid == 1
    assert remote.signal("n3", sleeper.pid, signal.SIGSTOP)
    stat = remote.exec("n3", ["cat", f"/proc/{sleeper.pid}/stat"]).out
    assert stat.rsplit(")", 1)[1].split()[0] == "T"
    assert remote.signal("n3", sleeper.pid, signal.SIGCONT)
    assert remote.signal("n3", sleeper.pid, signal.SIGKILL)
    assert not remote.running("n3", sleeper.pid)
    assert not remote.signal("n3", sleeper.pid, signal.SIGKILL)

    talker = remote.spawn("n3", ["sh", "-c", 'echo "$GREETING from $(pwd)"; echo err >&2'],
                          "/var/log/kchaos/deep/talker.log", env={"GREETING": "hello"},
                          cwd="/tmp")
    deadline = time.monotonic() + 10
    while remote.running("n3", talker.pid):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    remote.download("n3", talker.log, tmp_path / "talker.log")
    assert (tmp_path / "talker.log").read_text() == "hello from /tmp\nerr\n"


def test_pause_through_the_docker_api(remote, daemon):
    client = daemon[1]
    remote.pause_node("n3")
    try:
        assert client.api.inspect_container(remote.network.container("n3"))["State"]["Paused"]
        with pytest.raises(CommandError):
            remote.exec("n3", ["true"])
    finally:
        remote.unpause_node("n3")
    assert remote.exec("n3", ["true"]).exit == 0


def test_upload_and_download(remote, tmp_path):
    payload = bytes(range(256)) * 1000
    source = tmp_path / "payload.bin"
    source.write_bytes(payload)
    source.chmod(0o640)
    remote.upload("n1", source, "/srv/a/b/c/payload.bin")
    listing = remote.exec("n1", ["ls", "-l", "/srv/a/b/c/payload.bin"]).out
    assert listing.startswith("-rw-r-----") and str(len(payload)) in listing
    assert remote.exec("n1", ["ls", "-ld", "/tmp"]).out.startswith("drwxrwxrwt")
    remote.download("n1", "/srv/a/b/c/payload.bin", tmp_path / "back" / "payload.bin")
    assert (tmp_path / "back" / "payload.bin").read_bytes() == payload
    with pytest.raises(TransferError):
        remote.download("n1", "/srv/missing", tmp_path / "missing")
    with pytest.raises(TransferError):
        remote.download("n1", "/srv/a", tmp_path / "a-directory")
    with pytest.raises(TransferError):
        remote.upload("n1", tmp_path / "no-such-file", "/srv/x")


def test_destroy_run_works_from_the_labels_alone(daemon, image, tmp_path):
    private, client = daemon
    remote = DockerRemote.provision(["a1"], base_url=private.base_url, image=image,
                                    state_root=tmp_path)
    prefix = remote.network.prefix
    assert run_prefixes(tmp_path, include_owned=True) == [prefix]
    assert run_prefixes(tmp_path) == []
    remote.detach()
    assert run_prefixes(tmp_path) == [prefix]
    attached = DockerRemote.attach(tmp_path / prefix)
    assert attached.exec("a1", ["echo", "again"]).out == "again\n"
    destroy_run(prefix, tmp_path)
    label = {"label": f"{RUN_LABEL}={prefix}"}
    assert client.api.containers(all=True, filters=label) == []
    assert client.api.networks(filters=label) == []
    assert not (tmp_path / prefix).exists()
    destroy_run(prefix, tmp_path, client)
    assert not Path(f"/sys/class/net/{remote.network.bridge}").exists()
