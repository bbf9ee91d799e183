"""Targeted faults: the sequences that random faults rarely hit, each one op that waits for
the cluster to react (through ZooKeeper, as nemeses see it) and says what it saw.

- `shrink-isr` with value "kill" or "isolate" (or `{"then": ..., "topic": t, "partition":
  p, "hold": s}`): cut a partition's leader off from its followers (not from ZooKeeper),
  wait until its ISR in ZooKeeper is the leader alone (at most replica.lag.time.max.ms + a
  margin: the leader acknowledges writes alone meanwhile when min.insync.replicas=1; and
  `hold` seconds more once it is), then kill -9 the leader, or isolate it from every
  node, ZooKeeper included; then wait (at most two session timeouts + a margin) for the
  controller to elect another leader, out of sync, so an unclean election when it is
  enabled, or to leave the partition offline.
  Jepsen's 2013 Kafka scenario, without the staging. Where the controller is a broker,
  a partition it leads, or of which it is no replica, is preferred: Kafka since 2.7 shrinks
  an ISR by asking the controller, which a leader cut off from a controller that follows
  it cannot.
- `kill-new-leader` with value "leader" (or `{"topic": t, "partition": p}`): kill -9 a
  partition's leader, wait for the next election, kill the newly elected leader the
  moment it takes over, and wait for the election after that: fast successive leader
  changes (KIP-279).
- `strand-follower` with value "leader" (or `{"topic": t, "partition": p}`): KIP-101's
  first scenario. Of a partition whose ISR holds every replica, the follower first in
  assignment order is the one the controller will elect when the leader dies; the others
  are cut off from it (not from the leader, the controller or ZooKeeper). The leader is
  killed; the stranded followers take the next leader's LeaderAndIsr, then cannot fetch
  from it: under `replication.truncation.mode=high-watermark` they have truncated their
  log to their own high watermark, one fetch behind the leader's, and cannot fetch the
  tail back. After `STRAND_SECONDS` (well under replica.lag.time.max.ms, so they stay in
  the ISR) the new leader is killed too and the cut lifted (nothing is left to fetch from;
  a controller whose requests to the dead leader hung in the cut, as Kafka 0.10's do, is
  released), and a stranded follower is elected, cleanly, without the acknowledged tail.
  With leader-epoch truncation the follower asks the new leader for its epoch's end offset
  first, cannot, and keeps its log. A partition whose controller is one of the stranded
  followers is preferred, so the cut does not hold up their LeaderAndIsr. A partition
  qualifies once the op has seen its full ISR, every replica running, for
  `SETTLE_SECONDS` (clients write through it meanwhile: a leader killed the moment a
  restarted follower rejoins has acknowledged nothing to lose). When none does yet (after
  a heal, the brokers it restarted are still starting or catching up), the op waits, at
  most `QUALIFY_SECONDS`, before it answers "no-target"; at once when none ever can (no
  partition of three replicas or more). The completion says how long it waited
  (`waited`).
- `depose-coordinator` with value "coordinator": isolate the broker coordinating one of
  the run's consumer groups or transactional ids (preferably one that leads no partition
  of the workload's topics: the clients' sends to a partition it leads would stall while
  it is cut off, and with them their commits) from every node, ZooKeeper included,
  but not from the clients; wait (at most two session timeouts + a margin) until the
  controller elects another leader of the key's internal partition, hold
  `DEPOSED_SECONDS` while the clients still talk to the deposed coordinator, then lift
  the cut. Whatever it accepted alone is not on the new coordinator: a coordinator that
  acknowledges only replicated writes accepted nothing meanwhile.
- `heal-targeted`: lift this nemesis's firewall layer and start the brokers it killed.

Completions name the partition, the nodes acted on (`{"n1": "killed"}`, `"isolated"`,
`"killed-new-leader"`), whether and when the ISR shrank, and each election seen
(`elections`: new leader node or null when offline, leader epoch, ISR, seconds waited).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import Any, Protocol

from nemesis import grudge as grudges
from nemesis.base import BaseNemesis, completed, no_target, skipped
from nemesis.capabilities import (
    HasController,
    HasCoordinator,
    HasLeaders,
    Killable,
    PartitionableNetwork,
    PartitionState,
    Snapshot,
    require,
)
from nemesis.consumers import NO_COORDINATED, Consumers
from nemesis.partition import Firewall
from nemesis.targets import coordinator_target, leader_and_followers, leads_no_data


class Target(PartitionableNetwork, Killable, HasLeaders, Protocol):
    """What targeted faults act on: a db whose network they cut, whose brokers they kill,
    whose partition leaders they watch."""


__all__ = ["DEPOSED_SECONDS", "ELECTION_MARGIN", "LAYER", "QUALIFY_POLL", "QUALIFY_SECONDS",
           "SETTLE_SECONDS", "SHRINK_MARGIN", "STRAND_SECONDS", "StrandPlan", "Target",
           "TargetedNemesis", "choose_plan", "reaches_controller", "settled", "strand_candidates",
           "strandable"]

LAYER = "targeted"
STRAND_SECONDS = 1.0  # stranded followers truncate meanwhile; they stay in the ISR
SHRINK_MARGIN = 5.0  # seconds beyond replica.lag.time.max.ms to wait for the ISR shrink
ELECTION_MARGIN = 5.0  # seconds beyond two session timeouts to wait for an election
DEPOSED_SECONDS = 3.0  # clients keep talking to a deposed coordinator meanwhile
POLL = 0.02  # ZooKeeper polls: a new leader is acted on within tens of milliseconds
# A broker that `heal-targeted` restarted is back in every ISR by then: its JVM starts and
# it catches up (Kafka 0.10 took 12 to 15 s on a loaded 2-core machine).
QUALIFY_SECONDS = 30.0
QUALIFY_POLL = 0.25  # whole-cluster snapshots while waiting for a partition to qualify
SETTLE_SECONDS = 5.0  # a full ISR seen this long: clients have written through it

StrandPlan = tuple[PartitionState, int, tuple[int, ...]]


def reaches_controller(cluster: object) -> Callable[[PartitionState], bool] | None:
    """Where the controller is a broker (Kafka with ZooKeeper since 2.7 shrinks an ISR by
    asking it): partitions that the controller leads, or of which it is no replica, so a
    leader cut off from its followers still reaches it. None otherwise."""
    if not isinstance(cluster, HasController):
        return None
    node = cluster.controller()
    if node is None or node not in cluster.brokers:
        return None
    controller = cluster.broker_id(node)
    return lambda state: state.leader == controller or controller not in state.replicas


class TargetedNemesis(BaseNemesis):
    fs = frozenset({"shrink-isr", "kill-new-leader", "strand-follower", "depose-coordinator",
                    "heal-targeted"})

    def __init__(self, firewall: Firewall, rng: random.Random,
                 clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep,
                 consumers: Consumers | None = None) -> None:
        self.firewall = firewall
        self.rng = rng
        self.consumers = consumers if consumers is not None else Consumers()
        self.clock = clock
        self.sleep = sleep
        self.killed: set[str] = set()

    def setup(self, cluster: Target) -> None:
        self.firewall.clear(cluster, LAYER)

    def teardown(self, cluster: Target) -> None:
        self.firewall.clear(cluster, LAYER)

    def invoke(self, cluster: Target, op: dict) -> dict:
        if op["f"] == "heal-targeted":
            self.firewall.clear(cluster, LAYER)
            started = [n for n in sorted(self.killed) if cluster.start(n)]
            self.killed.clear()
            return completed(op, {"healed": True, "started": started})
        spec = op.get("value")
        options = spec if isinstance(spec, dict) else {}
        if op["f"] == "strand-follower":
            return completed(op, self._strand_follower(cluster, options))
        if op["f"] == "depose-coordinator":
            return self._depose_coordinator(cluster, op)
        found = leader_and_followers(
            cluster, self.rng, options.get("topic"), options.get("partition"), internal=False,
            prefer=reaches_controller(cluster) if op["f"] == "shrink-isr" else None)
        if found is None or not cluster.running(found[1]):
            return no_target(op)
        if op["f"] == "shrink-isr":
            then = options.get("then", spec if isinstance(spec, str) else "kill")
            if then not in ("kill", "isolate"):
                raise ValueError(f"shrink-isr: then must be kill or isolate, got {then!r}")
            value = self._shrink_isr(cluster, *found, then, float(options.get("hold", 0.0)))
        else:
            value = self._kill_new_leader(cluster, found[0], found[1])
        return completed(op, value)

    # -- shrink the ISR to the leader, then take the leader away ---------------------------

    def _shrink_isr(self, cluster: Target, state: PartitionState, leader: str,
                    followers: list[str], then: str, hold: float = 0.0) -> dict[str, Any]:
        value: dict[str, Any] = {"topic": state.topic, "partition": state.partition,
                                 "leader": leader, "followers": followers,
                                 "isr_before": [cluster.broker_node(b) for b in state.isr]}
        self.firewall.set(cluster, LAYER, grudges.between([leader], followers))
        value["cut"] = grudges.describe(grudges.between([leader], followers))
        lag = cluster.replica_lag_time
        started = self.clock()
        shrunk = self._wait(cluster, state, lambda s: s.leader != state.leader
                            or s.isr == (state.leader,), lag + SHRINK_MARGIN)
        value["isr_shrunk"] = shrunk is not None and shrunk.isr == (state.leader,)
        value["shrink_seconds"] = round(self.clock() - started, 3)
        if shrunk is not None and shrunk.leader != state.leader:
            value["leader_moved"] = cluster.broker_node(shrunk.leader) \
                if shrunk.leader >= 0 else None
            return value
        if hold and value["isr_shrunk"]:
            self.sleep(hold)
            value["held_seconds"] = hold
        if then == "kill":
            if cluster.kill(leader):
                self.killed.add(leader)
                value[leader] = "killed"
        else:
            self.firewall.set(cluster, LAYER, grudges.isolate(leader, list(cluster.nodes)))
            value[leader] = "isolated"
        value["elections"] = [self._next_election(cluster, state, shrunk or state)]
        return value

    # -- kill the leader, then the leader elected after it ---------------------------------

    def _kill_new_leader(self, cluster: Target, state: PartitionState,
                         leader: str, pause: float = 0.0,
                         then: Callable[[], None] = lambda: None) -> dict[str, Any]:
        """Kill `leader`, wait for the next election, `pause` seconds, then kill the newly
        elected leader, call `then`, and wait for the election after that."""
        value: dict[str, Any] = {"topic": state.topic, "partition": state.partition,
                                 "leader": leader}
        if not cluster.kill(leader):
            return {**value, leader: "not-killed"}
        self.killed.add(leader)
        value[leader] = "killed"
        first = self._next_election(cluster, state, state)
        value["elections"] = [first]
        new = first["leader"]
        if new not in cluster.brokers or new == leader:
            return value
        if pause:
            self.sleep(pause)
        if not cluster.kill(new):
            return value
        self.killed.add(new)
        value[new] = "killed-new-leader"
        then()
        after = PartitionState(state.topic, state.partition,
                               cluster.broker_id(new), first["leader_epoch"], (), ())
        value["elections"].append(self._next_election(cluster, state, after))
        return value

    # -- strand followers from the next leader, then kill the leader and the next ----------

    def _strand_follower(self, cluster: Target, options: dict) -> dict[str, Any] | str:
        started = self.clock()
        plan = self._qualifying(cluster, options.get("topic"), options.get("partition"),
                                started + QUALIFY_SECONDS)
        if plan is None:
            return "no-target"
        waited = round(self.clock() - started, 3)
        state, next_leader, stranded = plan
        leader, successor = cluster.broker_node(state.leader), cluster.broker_node(next_leader)
        stranded_nodes = [cluster.broker_node(b) for b in stranded]
        self.firewall.set(cluster, LAYER, grudges.between([successor], stranded_nodes))
        try:
            value = self._kill_new_leader(cluster, state, leader, pause=STRAND_SECONDS,
                                          then=lambda: self.firewall.clear(cluster, LAYER))
        finally:
            self.firewall.clear(cluster, LAYER)
        return {**value, "next_leader": successor, "stranded": stranded_nodes,
                "waited": waited}

    def _qualifying(self, cluster: Target, topic: str | None, partition: int | None,
                    deadline: float) -> StrandPlan | None:
        """A strand plan of a partition seen qualifying for `SETTLE_SECONDS`, polled until
        one does or `deadline`; None at once when no partition ever can."""
        since: dict[tuple[str, int, int], float] = {}
        while True:
            snapshot = cluster.snapshot()
            now = self.clock()
            if snapshot is not None:
                if not strandable(snapshot, topic, partition):
                    return None
                running = {cluster.broker_id(node) for node in cluster.brokers
                           if cluster.running(node)}
                candidates = strand_candidates(snapshot, topic, partition, running)
                ready, since = settled(candidates, since, now, SETTLE_SECONDS)
                if ready:
                    return choose_plan(ready, snapshot.controller, self.rng)
            if now >= deadline:
                return None
            self.sleep(QUALIFY_POLL)

    # -- isolate a coordinator until another broker coordinates ----------------------------

    def _depose_coordinator(self, cluster: Target, op: dict) -> dict:
        keys = self.consumers.coordinated()
        if not keys:
            return skipped(op, NO_COORDINATED)
        coordinators = require(cluster, HasCoordinator)
        found = coordinator_target(coordinators, keys, self.rng,
                                   prefer=leads_no_data(cluster))
        if found is None:
            return no_target(op)
        named, node = found
        kind = "group" if "group" in named else "transaction"
        topic, partition = coordinators.coordinator_partition(next(iter(named.values())), kind)
        state = cluster.partition_state(topic, partition)
        if state is None or state.leader < 0 or cluster.broker_node(state.leader) != node:
            return no_target(op)
        cut = grudges.isolate(node, list(cluster.nodes))
        value: dict[str, Any] = {**named, "coordinator": node, "topic": topic,
                                 "partition": partition, "cut": grudges.describe(cut)}
        self.firewall.set(cluster, LAYER, cut)
        try:
            value["elections"] = [self._next_election(cluster, state, state)]
            if value["elections"][0]["leader"] in cluster.brokers:
                self.sleep(DEPOSED_SECONDS)
        finally:
            self.firewall.clear(cluster, LAYER)
        return completed(op, value)

    # -- waiting on ZooKeeper ---------------------------------------------------------------

    def _next_election(self, cluster: Target, state: PartitionState,
                       since: PartitionState) -> dict[str, Any]:
        """The first leader elected after `since` (another broker, a leader epoch above its
        own): its node, epoch, ISR and the seconds it took. A partition left without a leader
        (Kafka's controller writes leader -1 first when the ISR had no other live member) is
        waited through; if no leader comes within two session timeouts and a margin, the
        answer is `None` (offline) or "timed-out" (no change at all)."""
        started = self.clock()
        bound = 2 * cluster.session_timeout + ELECTION_MARGIN
        seen: list[PartitionState] = []

        def elected(current: PartitionState) -> bool:
            if current.leader_epoch <= since.leader_epoch:
                return False
            seen.append(current)
            return current.leader >= 0 and current.leader != since.leader

        found = self._wait(cluster, state, elected, bound) or (seen[-1] if seen else None)
        seconds = round(self.clock() - started, 3)
        if found is None:
            return {"leader": "timed-out", "seconds": seconds}
        return {"leader": cluster.broker_node(found.leader) if found.leader >= 0 else None,
                "leader_epoch": found.leader_epoch,
                "isr": [cluster.broker_node(b) for b in found.isr if b >= 0],
                "seconds": seconds}

    def _wait(self, cluster: Target, state: PartitionState,
              done: Callable[[PartitionState], bool], bound: float) -> PartitionState | None:
        """Poll the partition's state until `done`, at most `bound` seconds; None if not."""
        deadline = self.clock() + bound
        while True:
            current = cluster.partition_state(state.topic, state.partition)
            if current is not None and done(current):
                return current
            if self.clock() >= deadline:
                return None
            self.sleep(POLL)


def _matches(state: PartitionState, topic: str | None, partition: int | None) -> bool:
    """A partition that `strand-follower` with `topic` and `partition` (None: any, of a
    topic not named "__...") may act on, of three replicas or more."""
    if (topic is not None and state.topic != topic) or \
            (topic is None and state.topic.startswith("__")) or \
            (partition is not None and state.partition != partition):
        return False
    return len(state.replicas) >= 3


def strandable(snapshot: Snapshot, topic: str | None = None,
               partition: int | None = None) -> bool:
    """Whether some partition could ever qualify for `strand-follower`: one it may act on
    has three replicas or more (whatever its leader and ISR now)."""
    return any(_matches(state, topic, partition) for state in snapshot.partitions)


def strand_candidates(snapshot: Snapshot, topic: str | None = None,
                      partition: int | None = None, running: Collection[int] | None = None
                      ) -> list[StrandPlan]:
    """The plans `strand-follower` may act on now: partitions (of a topic not named "__..."
    unless given) with a leader and every replica of at least three in the ISR, and, given
    `running` (broker ids whose process runs), every replica running; each with the
    follower the controller elects next (first in assignment order) and the other
    followers, to strand."""
    candidates = []
    for state in snapshot.partitions:
        if not _matches(state, topic, partition):
            continue
        if state.leader < 0 or set(state.isr) != set(state.replicas):
            continue
        if running is not None and not set(state.replicas) <= set(running):
            continue
        followers = [b for b in state.replicas if b != state.leader]
        candidates.append((state, followers[0], tuple(followers[1:])))
    return candidates


def settled(candidates: Sequence[StrandPlan], since: Mapping[tuple[str, int, int], float],
            now: float, hold: float
            ) -> tuple[list[StrandPlan], dict[tuple[str, int, int], float]]:
    """The candidates seen qualifying, under the same leader, for `hold` seconds by `now`,
    and the updated first-seen times (`since`: (topic, partition, leader) -> seconds; a
    partition that stopped qualifying starts again)."""
    def key(plan: StrandPlan) -> tuple[str, int, int]:
        return plan[0].topic, plan[0].partition, plan[0].leader

    seen = {key(c): since.get(key(c), now) for c in candidates}
    return [c for c in candidates if now - seen[key(c)] >= hold], seen


def choose_plan(candidates: Sequence[StrandPlan], controller: int | None,
                rng: random.Random) -> StrandPlan:
    """One of `candidates`: those whose controller is a stranded follower first, then a
    random one."""
    preferred = [c for c in candidates if controller in c[2]]
    return rng.choice(preferred or list(candidates))

