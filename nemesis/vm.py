"""Faults of whole machines, for nodes that are virtual machines (`--backend vagrant`).

`crash-vm` switches a machine off at once (`virsh destroy`): every process on it dies and
whatever its kernel had not written to the disk is lost, as in a power loss; `start-vm`
switches every machine that is off back on, waits for it to boot, and starts the services
(ZooKeeper, then the broker) that the node runs. `pause-vm` freezes a machine's whole
kernel (`virsh suspend`); `resume-vm` thaws every frozen one, whose clocks then jump.

Values: "one" (any node), "broker" or "zookeeper" (a node of that role). Completions:
`{"n2": "powered-off"}`, `{"n2": {"started": ["broker"]}}`, `{"n2": "paused"}`,
`{"n2": "resumed"}`, or "no-target".
The machines come from the remote (`harness.control.vagrant.MachineControl`); other
backends are refused before a run starts (`check_backend`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterable

from harness.control.vagrant import MachineControl
from nemesis.targets import ClusterControl

__all__ = ["VM_BACKENDS", "VM_FAULTS", "CrashVMNemesis", "PauseVMNemesis", "check_backend"]

VM_FAULTS = ("crash-vm", "pause-vm")
VM_BACKENDS = ("vagrant",)
SERVICE_TIMEOUT = 300.0


def check_backend(names: Iterable[str], backend: str) -> None:
    """ValueError when a fault of `names` needs machines that `backend` does not have."""
    for name in names:
        if name in VM_FAULTS and backend not in VM_BACKENDS:
            raise ValueError(f"nemesis {name} needs virtual machines: --backend "
                             f"{' or '.join(VM_BACKENDS)}, not {backend}")


def _machines(cluster: ClusterControl) -> MachineControl:
    remote = cluster.remote
    if not isinstance(remote, MachineControl):
        raise TypeError(f"nodes of {type(remote).__name__} are not machines")
    return remote


def _pick(cluster: ClusterControl, rng: random.Random, value: str | None,
          skip_state: str) -> list[str]:
    role = value or "one"
    pool = {"one": cluster.nodes, "broker": cluster.brokers,
            "zookeeper": cluster.zookeepers}.get(role)
    if pool is None:
        raise ValueError(f"target must be one, broker or zookeeper, got {role!r}")
    machines = _machines(cluster)
    candidates = [n for n in pool if machines.machine_state(n) != skip_state]
    return [rng.choice(candidates)] if candidates else []


def _start(cluster: ClusterControl, node: str, service: str) -> None:
    """Start `service` on a machine that just booted; ZooKeeper may need longer than the
    cluster's own wait to serve there (emulated CPUs, a cold page cache)."""
    deadline = time.monotonic() + SERVICE_TIMEOUT
    try:
        cluster.start(node, service)
    except TimeoutError:
        if service != "zookeeper":
            raise
        while cluster.zookeeper_mode(node) is None:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)


class CrashVMNemesis:
    fs = frozenset({"crash-vm", "start-vm"})

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def setup(self, cluster: ClusterControl) -> None:
        _machines(cluster)

    def teardown(self, cluster: ClusterControl) -> None:
        pass

    def invoke(self, cluster: ClusterControl, op: dict) -> dict:
        machines = _machines(cluster)
        if op["f"] == "crash-vm":
            targets = _pick(cluster, self.rng, op.get("value"), "shut off")
            for node in targets:
                machines.power_off(node)
            return {**op, "type": "info",
                    "value": {n: "powered-off" for n in targets} or "no-target"}
        off = [n for n in cluster.nodes if machines.machine_state(n) == "shut off"]
        for node in off:
            machines.power_on(node)
        started: dict[str, dict] = {node: {"started": []} for node in off}
        for service, nodes in (("zookeeper", cluster.zookeepers), ("broker", cluster.brokers)):
            for node in (n for n in off if n in nodes):
                _start(cluster, node, service)
                started[node]["started"].append(service)
        return {**op, "type": "info", "value": started or "no-target"}


class PauseVMNemesis:
    fs = frozenset({"pause-vm", "resume-vm"})

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def setup(self, cluster: ClusterControl) -> None:
        _machines(cluster)

    def teardown(self, cluster: ClusterControl) -> None:
        pass

    def invoke(self, cluster: ClusterControl, op: dict) -> dict:
        machines = _machines(cluster)
        if op["f"] == "pause-vm":
            targets = _pick(cluster, self.rng, op.get("value"), "paused")
            for node in targets:
                machines.suspend(node)
            return {**op, "type": "info",
                    "value": {n: "paused" for n in targets} or "no-target"}
        resumed = [n for n in cluster.nodes if machines.machine_state(n) == "paused"]
        for node in resumed:
            machines.resume(node)
        return {**op, "type": "info", "value": {n: "resumed" for n in resumed} or "no-target"}
