"""Process faults: kill -9 and start, graceful restart, pause and resume (brokers or
ZooKeeper), and ZooKeeper session expiry by firewalling a broker off the ensemble.

A broker target spec is "one" (a random running broker), "controller", "leader" (of a
random partition, or `{"target": "leader", "topic": t, "partition": p}`), "all", or a list
of nodes; `kill` also takes "coordinator" (the broker coordinating one of the run's consumer
groups; a logged no-op without groups). Ops come back with what was done per node
(`{"n2": "killed"}`, with `"group"` for a coordinator), "no-target" when the spec resolved
to nothing, or "not-started" when there was nothing to undo.
"""

from __future__ import annotations

import random
import time
from collections.abc import Sequence
from typing import Any

from nemesis import grudge as grudges
from nemesis.base import BaseNemesis, completed, skipped
from nemesis.capabilities import (
    HasController,
    HasCoordinator,
    HasLeaders,
    HasZooKeeper,
    Killable,
    Nodes,
    PartitionableNetwork,
    Pausable,
    require,
)
from nemesis.consumers import NO_COORDINATED, Consumers
from nemesis.partition import Firewall
from nemesis.targets import coordinator_target, leader_and_followers

__all__ = [
    "ExpireSessionNemesis",
    "KillNemesis",
    "PauseNemesis",
    "PauseZooKeeperNemesis",
    "RestartNemesis",
    "resolve_brokers",
]


def resolve_brokers(cluster: Nodes, spec: Any, rng: random.Random) -> list[str]:
    """The broker nodes a target spec means now (see the module docstring); of a db that
    cannot say which run (not `Killable`), every broker is taken as running."""
    if isinstance(spec, list | tuple):
        return [node for node in spec if node in cluster.brokers]
    options = spec if isinstance(spec, dict) else {"target": spec or "one"}
    target = options["target"]
    running = [node for node in cluster.brokers
               if not isinstance(cluster, Killable) or cluster.running(node)]
    if target == "one":
        return [rng.choice(running)] if running else []
    if target == "all":
        return running
    if target == "controller":
        node = require(cluster, HasController).controller()
        return [node] if node in running else []
    if target == "leader":
        found = leader_and_followers(require(cluster, HasLeaders), rng, options.get("topic"),
                                     options.get("partition"))
        return [found[1]] if found and found[1] in running else []
    raise ValueError(f"unknown target {target!r}: one, controller, leader, all or nodes")


def _done(op: dict, results: dict[str, str], empty: str = "no-target") -> dict:
    return completed(op, results or empty)


class KillNemesis(BaseNemesis):
    """`kill` (kill -9 the targets) and `start` (start every broker that is not running)."""

    fs = frozenset({"kill", "start"})

    def __init__(self, rng: random.Random, consumers: Consumers | None = None) -> None:
        self.rng = rng
        self.consumers = consumers or Consumers()

    def invoke(self, cluster: Killable, op: dict) -> dict:
        if op["f"] == "start":
            started = {n: "started" for n in cluster.brokers if cluster.start(n)}
            return _done(op, started, "not-started")
        if op.get("value") == "coordinator":
            return self._kill_coordinator(cluster, op)
        targets = resolve_brokers(cluster, op.get("value"), self.rng)
        return _done(op, {n: "killed" for n in targets if cluster.kill(n)})

    def _kill_coordinator(self, cluster: Killable, op: dict) -> dict:
        keys = self.consumers.coordinated()
        if not keys:
            return skipped(op, NO_COORDINATED)
        found = coordinator_target(require(cluster, HasCoordinator), keys, self.rng)
        if found is None or not cluster.running(found[1]) or not cluster.kill(found[1]):
            return _done(op, {})
        named, node = found
        return _done(op, {**named, node: "killed"})


class RestartNemesis(BaseNemesis):
    """`restart`: graceful stop (SIGTERM, controlled shutdown), then start again."""

    fs = frozenset({"restart"})

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def invoke(self, cluster: Killable, op: dict) -> dict:
        results = {}
        for node in resolve_brokers(cluster, op.get("value"), self.rng):
            if cluster.stop(node):
                cluster.start(node)
                results[node] = "restarted"
        return _done(op, results)


class _Pauser(BaseNemesis):
    """SIGSTOP the targets of one service; the resume op SIGCONTs every member of it."""

    service: str
    pause_f: str
    resume_f: str

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.paused: set[str] = set()
        self.fs = frozenset({self.pause_f, self.resume_f})

    def teardown(self, cluster: Pausable) -> None:
        self.invoke(cluster, {"f": self.resume_f})

    def invoke(self, cluster: Pausable, op: dict) -> dict:
        if op["f"] == self.resume_f:
            resumed = {n: "resumed" for n in sorted(self.paused)
                       if cluster.resume(n, self.service)}
            for node in self.members(cluster):
                cluster.resume(node, self.service)
            self.paused.clear()
            return _done(op, resumed, "not-started")
        paused = [n for n in self.targets(cluster, op.get("value"))
                  if cluster.pause(n, self.service)]
        self.paused.update(paused)
        return _done(op, {n: "paused" for n in paused})

    def members(self, cluster: Pausable) -> Sequence[str]:
        raise NotImplementedError

    def targets(self, cluster: Pausable, spec: Any) -> list[str]:
        raise NotImplementedError


class PauseNemesis(_Pauser):
    """`pause` (SIGSTOP the target brokers) and `resume` (SIGCONT every broker)."""

    service, pause_f, resume_f = "broker", "pause", "resume"

    def members(self, cluster: Pausable) -> Sequence[str]:
        return cluster.brokers

    def targets(self, cluster: Pausable, spec: Any) -> list[str]:
        return resolve_brokers(cluster, spec, self.rng)


class PauseZooKeeperNemesis(_Pauser):
    """`pause-zookeeper` with value "leader" (the ensemble leader now, the default),
    "majority" (a random majority) or "one"; `resume-zookeeper` continues every member."""

    service, pause_f, resume_f = "zookeeper", "pause-zookeeper", "resume-zookeeper"

    def members(self, cluster: Pausable) -> Sequence[str]:
        return require(cluster, HasZooKeeper).zookeepers

    def targets(self, cluster: Pausable, spec: Any) -> list[str]:
        ensemble = require(cluster, HasZooKeeper)
        members = list(ensemble.zookeepers)
        if spec in (None, "leader"):
            leaders = [n for n in members
                       if ensemble.zookeeper_mode(n) in ("leader", "standalone")]
            return leaders[:1]
        if spec == "majority":
            return sorted(self.rng.sample(members, len(members) // 2 + 1))
        if spec == "one":
            return [self.rng.choice(members)]
        raise ValueError(f"unknown ZooKeeper target {spec!r}: leader, majority or one")


class ExpireSessionNemesis(BaseNemesis):
    """`expire-session`: cut the target broker off every ZooKeeper member until its
    registration /brokers/ids/<id> disappears (the session expired; at most twice the
    session timeout), then heal; the broker registers again with a new session."""

    fs = frozenset({"expire-session"})

    def __init__(self, firewall: Firewall, rng: random.Random) -> None:
        self.firewall = firewall
        self.rng = rng

    def teardown(self, cluster: PartitionableNetwork) -> None:
        self.firewall.clear(cluster, "expire-session")

    def invoke(self, cluster: PartitionableNetwork, op: dict) -> dict:
        ensemble = require(cluster, HasZooKeeper)
        results = {}
        for node in resolve_brokers(cluster, op.get("value"), self.rng):
            others = [z for z in ensemble.zookeepers if z != node]
            self.firewall.set(cluster, "expire-session", grudges.between([node], others))
            try:
                expired = self._wait_unregistered(ensemble, node)
            finally:
                self.firewall.clear(cluster, "expire-session")
            results[node] = "expired" if expired else "not-expired"
        return _done(op, results)

    def _wait_unregistered(self, ensemble: HasZooKeeper, node: str) -> bool:
        deadline = time.monotonic() + 2 * ensemble.session_timeout + 2.0
        while time.monotonic() < deadline:
            if ensemble.registered(node) is False:
                return True
            time.sleep(0.1)
        return False
