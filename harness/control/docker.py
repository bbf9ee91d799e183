"""The `docker` backend: one container per node on a user-defined bridge network of one run.

A run gets a prefix `kd<4 hex>` and a free private /24 `10.79.<n>.0/24`. It creates, each
labelled `kchaos.run=<prefix>`:

    network     <prefix>-net       a bridge (`<prefix>br` on this machine, address .1)
    container   <prefix>-<node>    at 10.79.<n>.<10+i>, hostname <node>, NET_ADMIN, an init
                                   as pid 1 that reaps orphans, nft table `inet <prefix>`
    image       kchaos/run:<prefix> (when the run built its own; see `docker_image`)

Before anything is created, `<state root>/<prefix>/docker.json` records the run and the
daemon's address, so `destroy_run()` removes every piece from the labels alone, even after
the harness was SIGKILLed. Commands run through the exec API under `timeout`; spawned
processes run under `setsid` with their output appended to a log file inside the
container, and their pids are the container's. Files move with put_archive/get_archive.

`PrivateDaemon` starts a dockerd of its own (own data root, exec root and socket; no
iptables, no forwarding, no default bridge) for tests and benchmarks.
"""

from __future__ import annotations

import contextlib
import fcntl
import io
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal as signals
import subprocess
import tarfile
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import docker
import docker.errors
from docker.types import EndpointConfig, IPAMConfig, IPAMPool
from docker.utils.socket import STDERR, STDOUT, frames_iter

from harness.control.docker_image import NODE_PYTHON, RUN_LABEL, build_run_image
from harness.control.errors import (
    CommandError,
    CommandFailed,
    CommandNotFound,
    CommandTimeout,
    ProvisionError,
    SpawnError,
    TransferError,
)
from harness.control.firewall import firewall_rules
from harness.control.network import RunNetwork
from harness.control.remote import Process, Result
from harness.control.runstate import (
    default_state_root,
    owner_record,
    read_record,
    recorded_runs,
    release,
    write_json,
)

__all__ = ["DockerNetwork", "DockerRemote", "PrivateDaemon", "destroy_run", "run_prefixes"]

NODE_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")
PREFIX = re.compile(r"^kd[0-9a-f]{4}$")
STATE_FILE = "docker.json"
NODE_LABEL = "kchaos.node"
_SPAWN = ('log=$1; shift; mkdir -p "$(dirname "$log")" || exit 1\n'
          'setsid "$@" >>"$log" 2>&1 </dev/null & echo $!')


class DockerNetwork(RunNetwork):
    """Names and addresses of one run on a docker network."""

    site = "10.79"

    @property
    def name(self) -> str:
        return f"{self.prefix}-net"

    def container(self, node: str) -> str:
        self.address(node)
        return f"{self.prefix}-{node}"


class DockerRemote:
    """`Remote` over the containers of one run (see the module docstring)."""

    python = NODE_PYTHON  # the interpreter that runs `python -m broker` on a node

    def __init__(self, client: docker.DockerClient, network: DockerNetwork, state_dir: Path,
                 image: str) -> None:
        self.client = client
        self.network = network
        self.state_dir = state_dir
        self.image = image

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    def provision(cls, nodes: Sequence[str], *, base_url: str | None = None,
                  image: str | None = None, state_root: Path | None = None) -> DockerRemote:
        """Create the network and one running container per node; without `image`, build
        the run's own (`docker_image.build_run_image`). On failure, remove what was made."""
        for node in nodes:
            if not NODE_NAME.match(node):
                raise ProvisionError(f"node name {node!r} must match {NODE_NAME.pattern}")
        if len(set(nodes)) != len(nodes) or not 1 <= len(nodes) <= 200:
            raise ProvisionError(f"need 1 to 200 distinct node names, got {list(nodes)}")
        client = _client(base_url)
        root = state_root or default_state_root()
        root.mkdir(parents=True, exist_ok=True)
        with _locked(root):
            network = _allocate(client, tuple(nodes), root)
            state_dir = root / network.prefix
            state_dir.mkdir()
            write_json(state_dir / STATE_FILE, {
                **network.to_json(), "base_url": base_url or os.environ.get("DOCKER_HOST"),
                "image": image,
                "owner": owner_record()})
        remote = cls(client, network, state_dir, image or "")
        try:
            remote.image = image or build_run_image(client, network.prefix)
            remote._create()
        except BaseException:
            remote.destroy()
            raise
        return remote

    @classmethod
    def attach(cls, state_dir: Path) -> DockerRemote:
        """The remote of a run provisioned earlier, possibly by another process."""
        data = read_record(state_dir, STATE_FILE)
        return cls(_client(data["base_url"]), DockerNetwork.from_json(data), state_dir,
                   data.get("image") or f"kchaos/run:{data['prefix']}")

    def detach(self) -> None:
        """Let the run outlive this process: `destroy_run` then removes it whenever asked."""
        release(self.state_dir, STATE_FILE)

    def destroy(self) -> None:
        """Remove the run's containers, network, own image and state; idempotent."""
        destroy_run(self.network.prefix, self.state_dir.parent, self.client)

    def _create(self) -> None:
        net = self.network
        api = self.client.api
        try:
            self.client.networks.create(
                net.name, driver="bridge", labels={RUN_LABEL: net.prefix},
                ipam=IPAMConfig(pool_configs=[IPAMPool(subnet=net.cidr, gateway=net.gateway)]),
                options={"com.docker.network.bridge.name": net.bridge,
                         "com.docker.network.bridge.enable_ip_masquerade": "false"})
            hosts = {node: net.address(node) for node in net.nodes}
            for node in net.nodes:
                api.create_container(
                    self.image, command=["sleep", "infinity"], name=net.container(node),
                    hostname=node, labels={RUN_LABEL: net.prefix, NODE_LABEL: node},
                    host_config=api.create_host_config(
                        cap_add=["NET_ADMIN"], init=True, network_mode=net.name,
                        extra_hosts=hosts,
                        sysctls={"net.ipv6.conf.all.disable_ipv6": "1"}),
                    networking_config=api.create_networking_config({net.name: EndpointConfig(
                        api._version, ipv4_address=net.address(node))}))
            with ThreadPoolExecutor(max_workers=8) as pool:
                list(pool.map(self._start, net.nodes))
        except docker.errors.DockerException as error:
            raise ProvisionError(f"docker: cannot create run {net.prefix}: {error}") from error

    def _start(self, node: str) -> None:
        self.client.api.start(self.network.container(node))
        self.exec(node, ["nft", "-f", "-"], input=(
            f"table inet {self.network.table} {{\n  chain input {{\n"
            "    type filter hook input priority filter; policy accept;\n  }\n}\n"))

    # -- Remote ---------------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.network.nodes

    def address(self, node: str) -> str:
        return self.network.address(node)

    def exec(self, node: str, argv: Sequence[str], *, check: bool = True,
             timeout: float = 60.0, input: str | None = None) -> Result:
        container = self.network.container(node)
        api = self.client.api
        started = time.monotonic()
        try:
            exec_id = api.exec_create(container, ["timeout", "-s", "KILL", f"{timeout:g}",
                                                  *argv], stdin=input is not None)["Id"]
            stream = api.exec_start(exec_id, socket=True)
            out, err = _communicate(stream, input, timeout + 30)
            exit = api.exec_inspect(exec_id)["ExitCode"]
        except docker.errors.NotFound as error:
            raise CommandError(node, argv, f"no container: {error.explanation}") from error
        except (docker.errors.DockerException, OSError) as error:
            raise CommandError(node, argv, f"docker exec: {error}") from error
        if exit == 137 and time.monotonic() - started >= timeout:
            raise CommandTimeout(node, argv, timeout)
        if exit in (126, 127) and re.search(r"No such file|not found|can't execute", err):
            raise CommandNotFound(node, argv, err.strip())
        if check and exit != 0:
            raise CommandFailed(node, argv, exit, out, err)
        return Result(exit, out, err)

    def spawn(self, node: str, argv: Sequence[str], log: str, *,
              env: Mapping[str, str] | None = None, cwd: str | None = None) -> Process:
        container = self.network.container(node)
        try:
            exec_id = self.client.api.exec_create(
                container, ["sh", "-c", _SPAWN, "sh", log, *argv], workdir=cwd,
                environment=None if env is None else dict(env))["Id"]
            out, err = _communicate(self.client.api.exec_start(exec_id, socket=True), None, 30)
            pid = int(out.strip())
        except (docker.errors.DockerException, OSError, ValueError) as error:
            raise SpawnError(f"{node}: cannot start {argv[0]}: {error}") from error
        return Process(node, pid, tuple(argv), log)

    def signal(self, node: str, pid: int, sig: int) -> bool:
        if not self.running(node, pid):
            return False
        kill = ["sh", "-c", 'kill -s "$1" "-$2" 2>/dev/null || kill -s "$1" "$2"', "sh",
                str(int(sig)), str(pid)]
        if self.exec(node, kill, check=False).exit != 0:
            return False
        if sig == signals.SIGKILL:
            deadline = time.monotonic() + 5
            while self.running(node, pid) and time.monotonic() < deadline:
                time.sleep(0.02)
        return True

    def running(self, node: str, pid: int) -> bool:
        try:
            result = self.exec(node, ["cat", f"/proc/{int(pid)}/stat"], check=False)
        except CommandError:
            return False
        if result.exit != 0 or ")" not in result.out:
            return False
        return result.out.rsplit(")", 1)[1].split()[0] not in "ZX"

    def upload(self, node: str, local: Path | str, remote: str) -> None:
        container = self.network.container(node)
        path = Path(local)
        buffer = io.BytesIO()
        try:
            with tarfile.open(fileobj=buffer, mode="w") as tar:
                info = tar.gettarinfo(str(path), arcname=remote.lstrip("/"))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                with open(path, "rb") as data:
                    tar.addfile(info, data)
            if not self.client.api.put_archive(container, "/", buffer.getvalue()):
                raise TransferError(f"{node}: put_archive {remote} refused")
        except (OSError, docker.errors.DockerException) as error:
            raise TransferError(f"upload {local} -> {node}:{remote}: {error}") from error

    def download(self, node: str, remote: str, local: Path | str) -> None:
        container = self.network.container(node)
        target = Path(local)
        try:
            chunks, stat = self.client.api.get_archive(container, remote)
            with tarfile.open(fileobj=io.BytesIO(b"".join(chunks)), mode="r") as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    raise TransferError(f"{node}:{remote} is not a regular file")
                source = tar.extractfile(member)
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(source.read() if source else b"")
        except (OSError, tarfile.TarError, docker.errors.DockerException) as error:
            raise TransferError(f"download {node}:{remote} -> {local}: {error}") from error

    def clients_address(self) -> str:
        """The bridge's address on this host: the source of the clients' connections."""
        return self.network.gateway

    def firewall(self, node: str, drop_from: Sequence[str] = (),
                 loss_from: Mapping[str, float] | None = None) -> None:
        script = firewall_rules(self.network.table, drop_from, dict(loss_from or {}),
                                self.network.address)
        self.exec(node, ["nft", "-f", "-"], input=script)

    # -- beyond Remote: the docker API's own pause ------------------------------------------

    def pause_node(self, node: str) -> None:
        """Freeze every process of the node's container (the cgroup freezer)."""
        self._container_call(node, "pause")

    def unpause_node(self, node: str) -> None:
        self._container_call(node, "unpause")

    def _container_call(self, node: str, action: str) -> None:
        try:
            getattr(self.client.api, action)(self.network.container(node))
        except docker.errors.DockerException as error:
            raise CommandError(node, [action], f"docker {action}: {error}") from error


# -- teardown ---------------------------------------------------------------------------------


def run_prefixes(state_root: Path | None = None, include_owned: bool = False) -> list[str]:
    """Docker runs recorded under the state root; without `include_owned`, only those whose
    owner is gone or that were detached."""
    return recorded_runs(state_root or default_state_root(), STATE_FILE, PREFIX, include_owned)


def destroy_run(prefix: str, state_root: Path | None = None,
                client: docker.DockerClient | None = None) -> None:
    """Remove the containers, networks and images labelled with `prefix`, then its state
    directory. Works from the labels alone; idempotent."""
    if not PREFIX.match(prefix):
        raise ValueError(f"not a docker run prefix: {prefix!r}")
    root = state_root or default_state_root()
    if client is None:
        try:
            client = _client(json.loads((root / prefix / STATE_FILE).read_text())["base_url"])
        except (OSError, ValueError, KeyError):
            client = _client(None)
    label = {"label": f"{RUN_LABEL}={prefix}"}
    try:
        for container in client.api.containers(all=True, filters=label):
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_container(container["Id"], force=True)
        for network in client.api.networks(filters=label):
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_network(network["Id"])
        for image in client.api.images(filters=label):
            with contextlib.suppress(docker.errors.NotFound):
                client.api.remove_image(image["Id"], force=True)
    except docker.errors.DockerException as error:
        raise ProvisionError(f"docker: cannot remove run {prefix}: {error}") from error
    shutil.rmtree(root / prefix, ignore_errors=True)


# -- a private daemon -------------------------------------------------------------------------


@dataclass
class PrivateDaemon:
    """A dockerd of our own under `directory` (data, exec root, socket, pid file, log)."""

    directory: Path
    process: subprocess.Popen | None = None

    @property
    def base_url(self) -> str:
        return f"unix://{self.directory}/docker.sock"

    def start(self, timeout: float = 60.0) -> docker.DockerClient:
        """Start dockerd and wait until it answers `version`; returns a client on it."""
        if shutil.which("dockerd") is None:
            raise ProvisionError("dockerd is not installed (apt-get install docker.io)")
        self.directory.mkdir(parents=True, exist_ok=True)
        with open(self.directory / "dockerd.log", "ab") as log:
            self.process = subprocess.Popen(
                ["dockerd", "--iptables=false", "--ip-forward=false", "--bridge=none",
                 f"--data-root={self.directory}/data", f"--exec-root={self.directory}/exec",
                 f"--pidfile={self.directory}/docker.pid", "-H", self.base_url],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None:
                raise ProvisionError(f"dockerd exited {self.process.returncode}; see "
                                     f"{self.directory / 'dockerd.log'}")
            with contextlib.suppress(docker.errors.DockerException, OSError):
                client = docker.DockerClient(base_url=self.base_url, timeout=600)
                client.version()
                return client
            if time.monotonic() > deadline:
                self.stop()
                raise ProvisionError(f"dockerd did not answer within {timeout:g} s")
            time.sleep(0.1)

    def stop(self, grace: float = 30.0) -> None:
        """Remove every container and network of this daemon (bridges would outlive it),
        stop dockerd by its pid (SIGTERM, then SIGKILL of its group), unmount what it left
        mounted and remove the directory."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(docker.errors.DockerException, OSError):
                api = docker.APIClient(base_url=self.base_url, timeout=60)
                for container in api.containers(all=True):
                    api.remove_container(container["Id"], force=True)
                for network in api.networks():
                    if network["Name"] not in ("bridge", "host", "none"):
                        api.remove_network(network["Id"])
            self.process.terminate()
            try:
                self.process.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.process.pid, signals.SIGKILL)
                self.process.wait(timeout=10)
        for mount in reversed(_mounts_under(self.directory)):
            subprocess.run(["umount", "-l", mount], capture_output=True, check=False)
        shutil.rmtree(self.directory, ignore_errors=True)

    def __enter__(self) -> PrivateDaemon:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- helpers ----------------------------------------------------------------------------------


def _client(base_url: str | None) -> docker.DockerClient:
    try:
        if base_url is None:
            return docker.from_env(timeout=600)
        return docker.DockerClient(base_url=base_url, timeout=600)
    except docker.errors.DockerException as error:
        raise ProvisionError(f"docker: no daemon at {base_url or 'DOCKER_HOST'}: {error}") \
            from error


def _communicate(stream, input: str | None, timeout: float) -> tuple[str, str]:
    """Send `input` (then EOF) on an attached exec socket, read its stdout and stderr."""
    sock = getattr(stream, "_sock", stream)
    sock.settimeout(timeout)
    try:
        if input is not None:
            sock.sendall(input.encode())
        with contextlib.suppress(OSError):
            sock.shutdown(1)
        out, err = bytearray(), bytearray()
        for kind, data in frames_iter(stream, tty=False):
            (err if kind == STDERR else out if kind == STDOUT else bytearray()).extend(data)
    finally:
        stream.close()
    return out.decode(errors="replace"), err.decode(errors="replace")


def _allocate(client: docker.DockerClient, nodes: tuple[str, ...], root: Path) -> DockerNetwork:
    taken = set()
    for path in root.glob(f"*/{STATE_FILE}"):
        with contextlib.suppress(OSError, ValueError, KeyError):
            taken.add(int(json.loads(path.read_text())["subnet"]))
    used = _host_networks()
    try:
        for network in client.api.networks():
            for pool in (network.get("IPAM") or {}).get("Config") or []:
                if "Subnet" in pool:
                    used.append(ipaddress.ip_network(pool["Subnet"], strict=False))
    except docker.errors.DockerException as error:
        raise ProvisionError(f"docker: cannot list networks: {error}") from error
    start = secrets.randbelow(256)
    for step in range(256):
        subnet = (start + step) % 256
        candidate = ipaddress.ip_network(DockerNetwork.cidr_of(subnet))
        if subnet not in taken and not any(candidate.overlaps(net) for net in used):
            break
    else:
        raise ProvisionError("no free /24 in 10.79.0.0/16")
    for _ in range(100):
        prefix = f"kd{secrets.token_hex(2)}"
        if not (root / prefix).exists():
            return DockerNetwork(prefix, subnet, nodes)
    raise ProvisionError("no free run prefix")


def _host_networks() -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    try:
        text = subprocess.run(["ip", "-4", "route", "show", "table", "all"], text=True,
                              capture_output=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ProvisionError(f"ip route: {error}") from error
    networks = []
    for token in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", text):
        network = ipaddress.ip_network(token, strict=False)
        if network.prefixlen > 0:
            networks.append(network)
    return networks


def _mounts_under(directory: Path) -> list[str]:
    prefix = str(directory.resolve()) + "/"
    with open("/proc/self/mounts") as mounts:
        points = [line.split()[1] for line in mounts]
    return sorted(p for p in points if p.startswith(prefix))


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with open(root / ".docker-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
