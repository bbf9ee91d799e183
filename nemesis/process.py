"""Process faults: kill -9 and start, graceful restart, pause and resume (brokers,
dedicated controllers or ZooKeeper), and ZooKeeper session expiry by firewalling a broker
off the ensemble.

A target spec is "one" (a random running broker), "controller" (the controller: a broker,
or on a KRaft cluster with dedicated controllers the active controller's node), "leader"
(of a random partition, or `{"target": "leader", "topic": t, "partition": p}`), "all", or a
list of nodes; `kill` also takes "coordinator" (the broker coordinating one of the run's
consumer groups; a logged no-op without groups) and "quorum-majority" (a majority of the
metadata quorum's voters, the active controller among them). Ops come back with what was
done per node (`{"n2": "killed"}`, with `"group"` for a coordinator), "no-target" when the
spec resolved to nothing, or "not-started" when there was nothing to undo. `start` and
`resume` act on every broker and dedicated controller.
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
    HasQuorum,
    HasZooKeeper,
    Killable,
    Nodes,
    PartitionableNetwork,
    Pausable,
    dedicated_controllers,
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
    "resolve_targets",
]

Target = tuple[str, str]  # (node, service)


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


def resolve_targets(cluster: Nodes, spec: Any, rng: random.Random) -> list[Target]:
    """The (node, service) pairs a target spec means now: the active controller's own
    service when the db has dedicated controllers, a majority of the quorum's voters for
    "quorum-majority", brokers otherwise."""
    target = spec.get("target") if isinstance(spec, dict) else spec
    dedicated = dedicated_controllers(cluster)
    if target == "quorum-majority":
        return _quorum_majority(require(cluster, HasQuorum), rng)
    if target == "controller" and dedicated:
        node = require(cluster, HasQuorum).controller()
        return [(node, "controller")] if node in _running(cluster, dedicated, "controller") \
            else []
    return [(node, "broker") for node in resolve_brokers(cluster, spec, rng)]


def _quorum_majority(quorum: HasQuorum, rng: random.Random) -> list[Target]:
    """A random majority of the running voters, the active controller first."""
    voters = list(_running(quorum, quorum.voters, quorum.quorum_service))
    active = quorum.controller()
    if active not in voters:
        return []
    others = [node for node in voters if node != active]
    size = len(quorum.voters) // 2 + 1
    chosen = [active, *rng.sample(others, min(size - 1, len(others)))]
    return [(node, quorum.quorum_service) for node in chosen]


def _running(cluster: Nodes, nodes: Sequence[str], service: str) -> list[str]:
    return [node for node in nodes
            if not isinstance(cluster, Killable) or cluster.running(node, service)]


def _members(cluster: Nodes) -> list[Target]:
    """Every broker and dedicated controller."""
    return [*((node, "broker") for node in cluster.brokers),
            *((node, "controller") for node in dedicated_controllers(cluster))]


def _done(op: dict, results: dict[str, str], empty: str = "no-target") -> dict:
    return completed(op, results or empty)


class KillNemesis(BaseNemesis):
    """`kill` (kill -9 the targets) and `start` (start every broker and dedicated
    controller that is not running)."""

    fs = frozenset({"kill", "start"})

    def __init__(self, rng: random.Random, consumers: Consumers | None = None) -> None:
        self.rng = rng
        self.consumers = consumers or Consumers()

    def invoke(self, cluster: Killable, op: dict) -> dict:
        if op["f"] == "start":
            started = {n: "started" for n, service in _members(cluster)
                       if cluster.start(n, service)}
            return _done(op, started, "not-started")
        if op.get("value") == "coordinator":
            return self._kill_coordinator(cluster, op)
        targets = resolve_targets(cluster, op.get("value"), self.rng)
        return _done(op, {n: "killed" for n, service in targets if cluster.kill(n, service)})

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
        for node, service in resolve_targets(cluster, op.get("value"), self.rng):
            if cluster.stop(node, service):
                cluster.start(node, service)
                results[node] = "restarted"
        return _done(op, results)


class _Pauser(BaseNemesis):
    """SIGSTOP the targets; the resume op SIGCONTs every member."""

    pause_f: str
    resume_f: str

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.paused: set[Target] = set()
        self.fs = frozenset({self.pause_f, self.resume_f})

    def teardown(self, cluster: Pausable) -> None:
        self.invoke(cluster, {"f": self.resume_f})

    def invoke(self, cluster: Pausable, op: dict) -> dict:
        if op["f"] == self.resume_f:
            resumed = {n: "resumed" for n, service in sorted(self.paused)
                       if cluster.resume(n, service)}
            for node, service in self.members(cluster):
                cluster.resume(node, service)
            self.paused.clear()
            return _done(op, resumed, "not-started")
        paused = [(n, service) for n, service in self.targets(cluster, op.get("value"))
                  if cluster.pause(n, service)]
        self.paused.update(paused)
        return _done(op, {n: "paused" for n, _ in paused})

    def members(self, cluster: Pausable) -> Sequence[Target]:
        raise NotImplementedError

    def targets(self, cluster: Pausable, spec: Any) -> list[Target]:
        raise NotImplementedError


class PauseNemesis(_Pauser):
    """`pause` (SIGSTOP the targets) and `resume` (SIGCONT every broker and dedicated
    controller)."""

    pause_f, resume_f = "pause", "resume"

    def members(self, cluster: Pausable) -> Sequence[Target]:
        return _members(cluster)

    def targets(self, cluster: Pausable, spec: Any) -> list[Target]:
        return resolve_targets(cluster, spec, self.rng)


class PauseZooKeeperNemesis(_Pauser):
    """`pause-zookeeper` with value "leader" (the ensemble leader now, the default),
    "majority" (a random majority) or "one"; `resume-zookeeper` continues every member."""

    pause_f, resume_f = "pause-zookeeper", "resume-zookeeper"

    def members(self, cluster: Pausable) -> Sequence[Target]:
        return [(node, "zookeeper") for node in require(cluster, HasZooKeeper).zookeepers]

    def targets(self, cluster: Pausable, spec: Any) -> list[Target]:
        return [(node, "zookeeper") for node in self._nodes(cluster, spec)]

    def _nodes(self, cluster: Pausable, spec: Any) -> list[str]:
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
