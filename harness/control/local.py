"""The `local` backend: one network namespace per node on a bridge of this machine.

A run gets a prefix `kc<4 hex>` and a free private /24 `10.77.<n>.0/24`. It creates:

    bridge      <prefix>br              address 10.77.<n>.1, the controlling host's side
    namespace   <prefix>-<node>         one per node, with `lo` and `eth0` at 10.77.<n>.<10+i>
    veth        <prefix><node>          host end of the node's `eth0`, enslaved to the bridge
    nft table   inet <prefix>           inside each namespace: the node's inbound drops

There is no default route in a namespace and IPv6 is off, so nothing leaves the /24.
Before anything is created, `<state root>/<prefix>/network.json` records the run, so
`destroy_run()` can remove every piece after the harness was SIGKILLed. Runs choose their
/24 and create their bridge under one lock of the machine (`NETWORK_LOCK`, whatever their
state root), so two runs started at once never share a /24: a run sees another's subnet
in the routing table only once that run's bridge has its address. Processes are
spawned with `nsenter --net` (no fork: the pid is the program's own) in their own process
group; teardown kills every process found in the run's namespaces.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import json
import os
import re
import secrets
import shutil
import signal as signals
import subprocess
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from harness.control.errors import (
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

__all__ = ["LocalRemote", "Network", "destroy_run", "run_prefixes"]

NETNS_DIR = Path("/run/netns")
NODE_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")
PREFIX = re.compile(r"^kc[0-9a-f]{4}$")
NETWORK_FILE = "network.json"
# Under a user namespace /run is the namespace's own, as are its bridges.
NETWORK_LOCK = Path("/run/kchaos-networks.lock")


class Network(RunNetwork):
    """Names and addresses of one run on network namespaces."""

    site = "10.77"

    def netns(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def veth(self, node: str) -> str:
        return f"{self.prefix}{node}"


class LocalRemote:
    """`Remote` over the network namespaces of one run (see the module docstring)."""

    def __init__(self, network: Network, state_dir: Path) -> None:
        self.network = network
        self.state_dir = state_dir
        self._children: dict[tuple[str, int], subprocess.Popen] = {}

    # -- lifecycle -----------------------------------------------------------------------

    @classmethod
    def provision(cls, nodes: Sequence[str], state_root: Path | None = None) -> LocalRemote:
        """Create a bridge and one namespace per node; on failure, remove what was made.

        The run belongs to this process: once it is gone, `run_prefixes` lists the run as a
        leftover, unless `detach()` made it outlive its creator (`kchaos cluster up`)."""
        for node in nodes:
            if not NODE_NAME.match(node):
                raise ProvisionError(f"node name {node!r} must match {NODE_NAME.pattern}")
        if len(set(nodes)) != len(nodes) or not nodes or len(nodes) > 200:
            raise ProvisionError(f"need 1 to 200 distinct node names, got {list(nodes)}")
        root = state_root or default_state_root()
        root.mkdir(parents=True, exist_ok=True)
        with _locked(NETWORK_LOCK):
            network = _allocate(tuple(nodes), root)
            state_dir = root / network.prefix
            state_dir.mkdir()
            write_json(state_dir / NETWORK_FILE, {**network.to_json(), "owner": owner_record()})
            remote = cls(network, state_dir)
            try:
                remote._create_bridge()
            except BaseException:
                destroy_run(network.prefix, root)
                raise
        try:
            remote._create_nodes()
        except BaseException:
            remote.destroy()
            raise
        return remote

    @classmethod
    def attach(cls, state_dir: Path) -> LocalRemote:
        """The remote of a run provisioned earlier, possibly by another process."""
        return cls(Network.from_json(read_record(state_dir, NETWORK_FILE)), state_dir)

    def detach(self) -> None:
        """Let the run outlive this process: `destroy_run` then removes it whenever asked."""
        release(self.state_dir, NETWORK_FILE)

    def destroy(self) -> None:
        """Kill every process in the run's namespaces and remove all of it; idempotent."""
        destroy_run(self.network.prefix, self.state_dir.parent)
        for popen in self._children.values():
            popen.poll()
        self._children.clear()

    def _create_bridge(self) -> None:
        net = self.network
        _ip_batch([f"link add {net.bridge} type bridge"])
        _disable_ipv6(net.bridge)
        _ip_batch([f"addr add {net.gateway}/24 dev {net.bridge}", f"link set {net.bridge} up"])

    def _create_nodes(self) -> None:
        net = self.network
        _ip_batch([line for node in net.nodes for line in (
            f"netns add {net.netns(node)}",
            f"link add {net.veth(node)} type veth peer name eth0 netns {net.netns(node)}",
        )])
        for node in net.nodes:
            _disable_ipv6(net.veth(node))
        _ip_batch([f"link set {net.veth(node)} master {net.bridge} up" for node in net.nodes])
        with ThreadPoolExecutor(max_workers=8) as pool:
            list(pool.map(self._configure_node, net.nodes))

    def _configure_node(self, node: str) -> None:
        net = self.network
        self.exec(node, ["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1",
                         "net.ipv6.conf.default.disable_ipv6=1"])
        self.exec(node, ["ip", "-batch", "-"], input=(
            f"addr add {net.address(node)}/24 dev eth0\nlink set eth0 up\nlink set lo up\n"))
        self.exec(node, ["nft", "-f", "-"], input=(
            f"table inet {net.table} {{\n  chain input {{\n"
            "    type filter hook input priority filter; policy accept;\n  }\n}\n"))

    # -- Remote ---------------------------------------------------------------------------

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.network.nodes

    def address(self, node: str) -> str:
        return self.network.address(node)

    def exec(self, node: str, argv: Sequence[str], *, check: bool = True,
             timeout: float = 60.0, input: str | None = None) -> Result:
        try:
            done = subprocess.run(self._enter(node) + list(argv), input=input,
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CommandTimeout(node, argv, timeout) from None
        except OSError as error:
            raise CommandNotFound(node, argv, str(error)) from error
        if done.returncode == 127 and "failed to execute" in done.stderr:
            raise CommandNotFound(node, argv, done.stderr.strip())
        if check and done.returncode != 0:
            raise CommandFailed(node, argv, done.returncode, done.stdout, done.stderr)
        return Result(done.returncode, done.stdout, done.stderr)

    def spawn(self, node: str, argv: Sequence[str], log: str, *,
              env: Mapping[str, str] | None = None, cwd: str | None = None) -> Process:
        enter = self._enter(node)
        try:
            Path(log).parent.mkdir(parents=True, exist_ok=True)
            with open(log, "ab") as out:
                popen = subprocess.Popen(
                    enter + list(argv), stdin=subprocess.DEVNULL, stdout=out,
                    stderr=subprocess.STDOUT, start_new_session=True,
                    env=None if env is None else dict(env), cwd=cwd)
        except OSError as error:
            raise SpawnError(f"{node}: cannot start {argv[0]}: {error}") from error
        self._children[(node, popen.pid)] = popen
        return Process(node, popen.pid, tuple(argv), str(log))

    def signal(self, node: str, pid: int, sig: int) -> bool:
        if not self.running(node, pid):
            return False
        if not _kill_group(pid, sig):
            return False
        if sig == signals.SIGKILL and (node, pid) in self._children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._children[(node, pid)].wait(timeout=5)
        return True

    def running(self, node: str, pid: int) -> bool:
        namespace = NETNS_DIR / self.network.netns(node)
        if (node, pid) in self._children:  # true also just before nsenter enters the namespace
            return self._children[(node, pid)].poll() is None
        try:
            if _proc_state(pid) in "ZX":
                return False
            return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(namespace).st_ino
        except OSError:
            return False

    def upload(self, node: str, local: Path | str, remote: str) -> None:
        self.network.address(node)
        _copy(Path(local), Path(remote))

    def download(self, node: str, remote: str, local: Path | str) -> None:
        self.network.address(node)
        _copy(Path(remote), Path(local))

    def clients_address(self) -> str:
        """The bridge's address on this host: the source of the clients' connections."""
        return self.network.gateway

    def firewall(self, node: str, drop_from: Sequence[str] = (),
                 loss_from: Mapping[str, float] | None = None) -> None:
        script = firewall_rules(self.network.table, drop_from, dict(loss_from or {}),
                                self.network.address)
        self.exec(node, ["nft", "-f", "-"], input=script)

    def _enter(self, node: str) -> list[str]:
        self.network.address(node)
        return ["nsenter", f"--net={NETNS_DIR / self.network.netns(node)}", "--"]


# -- teardown ---------------------------------------------------------------------------------


def run_prefixes(state_root: Path | None = None, include_owned: bool = False) -> list[str]:
    """Runs recorded under the state root; without `include_owned`, only those whose owner
    is gone (SIGKILLed harness) or that have none (`kchaos cluster up`)."""
    return recorded_runs(state_root or default_state_root(), NETWORK_FILE, PREFIX,
                         include_owned)


def destroy_run(prefix: str, state_root: Path | None = None, grace: float = 5.0) -> None:
    """Remove everything named with `prefix`: processes in its namespaces, veths, namespaces,
    bridge, then its state directory. Works from the names alone; idempotent."""
    if not PREFIX.match(prefix):
        raise ValueError(f"not a run prefix: {prefix!r}")
    namespaces = [name for name in _netns_names() if name.startswith(prefix + "-")]
    victims = set()
    for name in namespaces:
        for pid in _netns_pids(name):
            victims.add(pid)
            _kill_group(pid, signals.SIGKILL)
    deadline = time.monotonic() + grace
    while victims and time.monotonic() < deadline:
        victims = {pid for pid in victims if _proc_state(pid) not in "ZX"}
        if victims:
            time.sleep(0.01)
    links = [name for name in _link_names() if name.startswith(prefix)]
    bridge = f"{prefix}br"
    commands = [f"link del {name}" for name in links if name != bridge]
    commands += [f"netns del {name}" for name in namespaces]
    commands += [f"link del {bridge}"] if bridge in links else []
    if commands:
        _ip_batch(commands, force=True)
    root = state_root or default_state_root()
    shutil.rmtree(root / prefix, ignore_errors=True)
    if victims:
        raise ProvisionError(f"processes {sorted(victims)} of run {prefix} did not die")


# -- helpers ----------------------------------------------------------------------------------


def _allocate(nodes: tuple[str, ...], root: Path) -> Network:
    taken = {Network.from_json(json.loads(p.read_text())).subnet
             for p in root.glob(f"*/{NETWORK_FILE}")}
    used = _routed_networks()
    names = set(_netns_names()) | set(_link_names())
    start = secrets.randbelow(256)
    for step in range(256):
        subnet = (start + step) % 256
        candidate = ipaddress.ip_network(Network.cidr_of(subnet))
        if subnet not in taken and not any(candidate.overlaps(net) for net in used):
            break
    else:
        raise ProvisionError("no free /24 in 10.77.0.0/16")
    for _ in range(100):
        prefix = f"kc{secrets.token_hex(2)}"
        if not (root / prefix).exists() and not any(n.startswith(prefix) for n in names):
            return Network(prefix, subnet, nodes)
    raise ProvisionError("no free run prefix")


def _routed_networks() -> list[ipaddress.IPv4Network]:
    text = _run(["ip", "-4", "-o", "addr", "show"]) + _run(
        ["ip", "-4", "route", "show", "table", "all"])
    networks = []
    for token in re.findall(r"\b(\d+\.\d+\.\d+\.\d+(?:/\d+)?)", text):
        network = ipaddress.ip_network(token, strict=False)
        if network.prefixlen > 0:
            networks.append(network)
    return networks


def _netns_names() -> list[str]:
    return [line.split()[0] for line in _run(["ip", "netns", "list"]).splitlines() if line]


def _netns_pids(name: str) -> list[int]:
    try:
        return [int(p) for p in _run(["ip", "netns", "pids", name]).split()]
    except ProvisionError:
        return []


def _link_names() -> list[str]:
    return [line.split(":")[1].strip().split("@")[0]
            for line in _run(["ip", "-o", "link", "show"]).splitlines() if ":" in line]


def _ip_batch(lines: Sequence[str], force: bool = False) -> None:
    _run(["ip"] + (["-force"] if force else []) + ["-batch", "-"], "\n".join(lines) + "\n",
         check=not force)


def _run(argv: Sequence[str], input: str | None = None, check: bool = True) -> str:
    try:
        done = subprocess.run(list(argv), input=input, capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise ProvisionError(f"{' '.join(argv)}: {error}") from error
    if check and done.returncode != 0:
        raise ProvisionError(f"{' '.join(argv)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def _kill_group(pid: int, sig: int) -> bool:
    """Signal the process group `pid` leads, or the process alone; False if it is gone."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def _disable_ipv6(link: str) -> None:
    with contextlib.suppress(OSError):
        Path(f"/proc/sys/net/ipv6/conf/{link}/disable_ipv6").write_text("1")


def _proc_state(pid: int) -> str:
    """The state letter of /proc/<pid>/stat, "X" when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _copy(source: Path, target: Path) -> None:
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(source, target)
    except OSError as error:
        raise TransferError(f"copy {source} -> {target}: {error}") from error


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with open(path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)

