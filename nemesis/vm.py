"""Faults of whole machines, for a db whose nodes are virtual machines (`VMControl`:
`--backend vagrant`; a db without it refuses them before the run).

`crash-vm` switches a machine off at once (`virsh destroy`): every process on it dies and
whatever its kernel had not written to the disk is lost, as in a power loss; `start-vm`
switches every machine that is off back on, waits for it to boot, and starts the services
(ZooKeeper, then the broker) that the node runs. `pause-vm` freezes a machine's whole
kernel (`virsh suspend`); `resume-vm` thaws every frozen one, whose clocks then jump.

Values: "one" (any node), "broker" or "zookeeper" (a node of that role). Completions:
`{"n2": "powered-off"}`, `{"n2": {"started": ["broker"]}}`, `{"n2": "paused"}`,
`{"n2": "resumed"}`, or "no-target".
"""

from __future__ import annotations

import random
import time

from nemesis.base import BaseNemesis, completed
from nemesis.capabilities import HasZooKeeper, Killable, VMControl, require, zookeepers

__all__ = ["VMNemesis"]

SERVICE_TIMEOUT = 300.0
# start f -> the machine state its target must not be in already, and the completion word
SWITCHES = {"crash-vm": ("shut off", "powered-off"), "pause-vm": ("paused", "paused")}


class VMNemesis(BaseNemesis):
    """`crash-vm` / `start-vm` and `pause-vm` / `resume-vm`."""

    fs = frozenset({"crash-vm", "start-vm", "pause-vm", "resume-vm"})

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def invoke(self, cluster: VMControl, op: dict) -> dict:
        if op["f"] in SWITCHES:
            skip_state, word = SWITCHES[op["f"]]
            switch = cluster.power_off if op["f"] == "crash-vm" else cluster.suspend_machine
            targets = self._pick(cluster, op.get("value"), skip_state)
            for node in targets:
                switch(node)
            return completed(op, {n: word for n in targets} or "no-target")
        if op["f"] == "resume-vm":
            paused = [n for n in cluster.nodes if cluster.machine_state(n) == "paused"]
            for node in paused:
                cluster.resume_machine(node)
            return completed(op, {n: "resumed" for n in paused} or "no-target")
        return completed(op, self._start_machines(cluster) or "no-target")

    def _pick(self, cluster: VMControl, value: str | None, skip_state: str) -> list[str]:
        role = value or "one"
        pool = {"one": cluster.nodes, "broker": cluster.brokers,
                "zookeeper": zookeepers(cluster)}.get(role)
        if pool is None:
            raise ValueError(f"target must be one, broker or zookeeper, got {role!r}")
        candidates = [n for n in pool if cluster.machine_state(n) != skip_state]
        return [self.rng.choice(candidates)] if candidates else []

    def _start_machines(self, cluster: VMControl) -> dict[str, dict]:
        """Power on every machine that is off, then start its services."""
        off = [n for n in cluster.nodes if cluster.machine_state(n) == "shut off"]
        for node in off:
            cluster.power_on(node)
        services = require(cluster, Killable)
        started: dict[str, dict] = {node: {"started": []} for node in off}
        for service, nodes in (("zookeeper", zookeepers(cluster)), ("broker", cluster.brokers)):
            for node in (n for n in off if n in nodes):
                _start(services, node, service)
                started[node]["started"].append(service)
        return started


def _start(cluster: Killable, node: str, service: str) -> None:
    """Start `service` on a machine that just booted; ZooKeeper may need longer than the
    cluster's own wait to serve there (emulated CPUs, a cold page cache)."""
    deadline = time.monotonic() + SERVICE_TIMEOUT
    try:
        cluster.start(node, service)
    except TimeoutError:
        if service != "zookeeper":
            raise
        ensemble = require(cluster, HasZooKeeper)
        while ensemble.zookeeper_mode(node) is None:
            if time.monotonic() > deadline:
                raise
            time.sleep(1.0)
