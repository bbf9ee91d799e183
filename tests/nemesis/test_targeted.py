"""Targeted faults (shrink the ISR then kill or isolate the leader; kill the new leader) and
the power-loss crash, on a fake cluster whose ZooKeeper reacts as a controller would."""

from __future__ import annotations

import json
import random

import pytest

from nemesis.capabilities import (
    HasLeaders,
    Killable,
    LosesUnflushed,
    PartitionableNetwork,
    PartitionState,
    Snapshot,
)
from nemesis.consumers import NO_COORDINATED, Consumers
from nemesis.package import FAULTS, GROUPS, expand, package
from nemesis.partition import Firewall
from nemesis.power_loss import CrashLoseUnflushedNemesis
from nemesis.targeted import (
    DEPOSED_SECONDS,
    QUALIFY_SECONDS,
    SETTLE_SECONDS,
    STRAND_SECONDS,
    TargetedNemesis,
    choose_plan,
    settled,
    strand_candidates,
    strandable,
)
from nemesis.targets import leader_and_followers
from tests.support.fake_cluster import FakeCluster, FakeResult

STATE = "/brokers/topics/t/partitions/0/state"


class ReactiveZk:
    """t-0 (replicas 4, 5, 1; leader 4): the ISR shrinks to the leader once it is cut off
    from its followers; when the leader is dead or cut off from ZooKeeper, the first live
    replica reachable from ZooKeeper leads at the next epoch (unclean: ISR = itself)."""

    def __init__(self, cluster: FakeCluster, shrinks: bool = True) -> None:
        self.cluster = cluster
        self.shrinks = shrinks
        self.state = {"controller_epoch": 7, "leader": 4, "version": 1, "leader_epoch": 3,
                      "isr": [4, 5, 1]}
        self.znodes = {"/brokers/topics/t": b'{"version":2,"partitions":{"0":[4,5,1]}}',
                       "/brokers/topics": b"", "/brokers/topics/t/partitions": b"",
                       "/brokers/topics/t/partitions/0": b""}

    def _alive(self, broker: int) -> bool:
        node = self.cluster.broker_node(broker)
        return self.cluster.running(node) and "z1" not in self.cluster.remote.drops.get(node, ())

    def _react(self) -> None:
        leader = self.state["leader"]
        node = self.cluster.broker_node(leader) if leader > 0 else None
        drops = self.cluster.remote.drops.get(node, frozenset()) if node else frozenset()
        if node and not self._alive(leader):
            live = [b for b in (4, 5, 1) if b != leader and self._alive(b)]
            new = live[0] if live else -1
            self.state.update(leader=new, leader_epoch=self.state["leader_epoch"] + 1,
                              isr=[new] if live else [leader])
        elif self.shrinks and node and {"n5", "n1"} <= drops:
            self.state["isr"] = [leader]

    def get_async(self, path):
        if path == STATE:
            self._react()
            return FakeResult((json.dumps(self.state).encode(), None))
        return FakeResult((self.znodes[path], None))

    def exists_async(self, path):
        return FakeResult(object() if path in self.znodes or path == STATE else None)

    def get_children_async(self, path):
        prefix = path.rstrip("/") + "/"
        names = {p[len(prefix):].split("/")[0] for p in [*self.znodes, STATE]
                 if p.startswith(prefix)}
        return FakeResult(sorted(names))


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def setup(shrinks: bool = True) -> tuple[FakeCluster, TargetedNemesis, Clock]:
    cluster = FakeCluster()
    cluster.zk = ReactiveZk(cluster, shrinks)
    clock = Clock()
    return cluster, TargetedNemesis(Firewall(), random.Random(1), clock, clock.sleep), clock


def test_shrink_isr_then_kill_the_leader_forces_an_election_of_an_out_of_sync_follower():
    cluster, nemesis, _ = setup()
    done = nemesis.invoke(cluster, {"type": "info", "process": "nemesis", "f": "shrink-isr",
                                    "value": "kill"})
    value = done["value"]
    assert done["type"] == "info"
    assert (value["topic"], value["partition"], value["leader"]) == ("t", 0, "n4")
    assert value["followers"] == ["n5", "n1"] and value["isr_before"] == ["n4", "n5", "n1"]
    assert value["isr_shrunk"] and value["n4"] == "killed"
    assert value["elections"][0]["leader"] == "n5" and value["elections"][0]["leader_epoch"] == 4
    assert not cluster.running("n4")
    assert cluster.remote.drops["n5"] == {"n4"}, "followers stay cut off until healed"
    healed = nemesis.invoke(cluster, {"f": "heal-targeted"})
    assert healed["value"] == {"healed": True, "started": ["n4"]}
    assert cluster.running("n4") and not any(cluster.remote.drops.values())


def test_shrink_isr_then_isolate_the_leader_from_everyone_zookeeper_included():
    cluster, nemesis, _ = setup()
    value = nemesis.invoke(cluster, {"f": "shrink-isr", "value": {"then": "isolate",
                                                                  "topic": "t"}})["value"]
    assert value["n4"] == "isolated" and cluster.running("n4")
    assert cluster.remote.drops["n4"] == {"n1", "n2", "n3", "n5", "z1"}
    assert value["elections"][0]["leader"] == "n5"
    assert nemesis.invoke(cluster, {"f": "heal-targeted"})["value"]["started"] == []
    assert not any(cluster.remote.drops.values())


def test_an_isr_that_does_not_shrink_is_waited_for_a_bounded_time_and_said():
    cluster, nemesis, clock = setup(shrinks=False)
    value = nemesis.invoke(cluster, {"f": "shrink-isr", "value": "kill"})["value"]
    assert not value["isr_shrunk"]
    assert value["shrink_seconds"] == pytest.approx(cluster.replica_lag_time + 5.0, abs=0.2)
    assert value["n4"] == "killed" and value["elections"][0]["leader"] == "n5"


def test_kill_new_leader_kills_the_leader_then_its_successor():
    cluster, nemesis, _ = setup()
    value = nemesis.invoke(cluster, {"f": "kill-new-leader", "value": "leader"})["value"]
    assert value["n4"] == "killed" and value["n5"] == "killed-new-leader"
    assert [e["leader"] for e in value["elections"]] == ["n5", "n1"]
    assert [e["leader_epoch"] for e in value["elections"]] == [4, 5]
    assert nemesis.invoke(cluster, {"f": "heal-targeted"})["value"]["started"] == ["n4", "n5"]


def test_strand_follower_elects_a_follower_cut_off_from_the_leader_before_it():
    cluster, nemesis, clock = setup()
    seen_drops = []
    kill = cluster.kill

    def kill_and_look(node: str, service: str = "broker") -> bool:
        seen_drops.append({n: set(d) for n, d in cluster.remote.drops.items() if d})
        return kill(node, service)

    cut_while_waiting = []
    next_election = nemesis._next_election

    def wait_and_look(*args):
        cut_while_waiting.append(any(cluster.remote.drops.values()))
        return next_election(*args)

    cluster.kill = kill_and_look
    nemesis._next_election = wait_and_look
    value = nemesis.invoke(cluster, {"f": "strand-follower", "value": "leader"})["value"]
    assert cut_while_waiting == [True, False], "the cut is lifted once the new leader died"
    assert (value["leader"], value["next_leader"], value["stranded"]) == ("n4", "n5", ["n1"])
    assert seen_drops[0] == {"n5": {"n1"}, "n1": {"n5"}}, "cut before the leader dies"
    assert value["n4"] == "killed" and value["n5"] == "killed-new-leader"
    assert [e["leader"] for e in value["elections"]] == ["n5", "n1"]
    assert clock.now >= STRAND_SECONDS
    assert nemesis.invoke(cluster, {"f": "heal-targeted"})["value"]["started"] == ["n4", "n5"]


def test_the_plan_prefers_a_partition_whose_controller_is_stranded():
    def state(partition: int, replicas: tuple[int, ...], isr: tuple[int, ...] | None = None):
        return PartitionState("t", partition, replicas[0], 1, isr or replicas, replicas)

    partitions = (state(0, (1, 2, 3)), state(1, (2, 3, 1)), state(2, (3, 1, 2)),
                  state(3, (1, 2, 3), (1, 2)), state(4, (1, 2)))
    snapshot = Snapshot(1, 1, frozenset({1, 2, 3}), partitions)
    assert choose_plan(strand_candidates(snapshot), 1, random.Random(3)) == (partitions[1], 3, (1,))
    leaderless = Snapshot(None, 1, frozenset({1, 2, 3}), partitions[3:])
    assert strand_candidates(leaderless) == [], "full ISR of 3 or more needed"


def test_a_candidate_needs_every_replica_running_and_strandable_needs_three():
    def state(partition: int, replicas: tuple[int, ...]):
        return PartitionState("t", partition, replicas[0], 1, replicas, replicas)

    partitions = (state(0, (1, 2, 3)), state(1, (2, 3, 4)), state(2, (4, 5)))
    snapshot = Snapshot(5, 1, frozenset({1, 2, 3, 4, 5}), partitions)
    assert strand_candidates(snapshot, running={2, 3, 4}) == [(partitions[1], 3, (4,))]
    assert strand_candidates(snapshot, running={1, 2}) == [], \
        "a replica killed moments ago is still in the ISR ZooKeeper shows"
    assert strandable(snapshot) and strandable(snapshot, "t", 1)
    assert not strandable(snapshot, "t", 2) and not strandable(snapshot, "other")


def test_a_partition_settles_after_qualifying_under_one_leader_for_the_hold():
    def state(leader: int, isr: tuple[int, ...]):
        return Snapshot(1, 1, frozenset({1, 2, 3}),
                        (PartitionState("t", 0, leader, 1, isr, (1, 2, 3)),))

    full = strand_candidates(state(1, (1, 2, 3)))
    ready, since = settled(full, {}, 10.0, 5.0)
    assert ready == [] and since == {("t", 0, 1): 10.0}
    ready, since = settled(full, since, 15.0, 5.0)
    assert ready == full
    ready, since = settled(strand_candidates(state(1, (1, 2))), since, 16.0, 5.0)
    assert ready == [] and since == {}, "an ISR that shrank starts over"
    moved = strand_candidates(state(2, (1, 2, 3)))
    assert settled(moved, {("t", 0, 1): 0.0}, 16.0, 5.0)[0] == [], "a new leader starts over"


def test_strand_follower_waits_for_the_isr_to_fill_again_after_a_heal():
    cluster, nemesis, clock = setup()
    zk = cluster.zk
    zk.state["isr"] = [4]
    react = zk._react

    def rejoin_after_12_s() -> None:
        if clock.now >= 12.0 and zk.state["leader_epoch"] == 3:
            zk.state["isr"] = [4, 5, 1]
        react()

    zk._react = rejoin_after_12_s
    value = nemesis.invoke(cluster, {"f": "strand-follower", "value": "leader"})["value"]
    assert value["waited"] == pytest.approx(12.0 + SETTLE_SECONDS, abs=0.3), \
        "acts once the full ISR has held for the settle time"
    assert (value["leader"], value["next_leader"], value["stranded"]) == ("n4", "n5", ["n1"])
    assert [e["leader"] for e in value["elections"]] == ["n5", "n1"]


def test_strand_follower_answers_no_target_when_nothing_qualifies_within_its_bound():
    cluster, nemesis, clock = setup()
    cluster.zk.state["isr"] = [4, 5]
    done = nemesis.invoke(cluster, {"f": "strand-follower", "value": "leader"})
    assert done["value"] == "no-target"
    assert QUALIFY_SECONDS <= clock.now <= QUALIFY_SECONDS + 1
    assert all(cluster.running(n) for n in cluster.brokers) and not any(
        cluster.remote.drops.values())


def test_strand_follower_answers_no_target_at_once_when_no_partition_ever_can():
    cluster, nemesis, clock = setup()
    cluster.zk.znodes["/brokers/topics/t"] = b'{"version":2,"partitions":{"0":[4,5]}}'
    done = nemesis.invoke(cluster, {"f": "strand-follower", "value": "leader"})
    assert done["value"] == "no-target" and clock.now == 0.0


def test_an_election_that_never_comes_times_out():
    cluster, nemesis, clock = setup()
    cluster.zk._react = lambda: None  # no controller
    value = nemesis.invoke(cluster, {"f": "kill-new-leader", "value": "leader"})["value"]
    assert value["elections"] == [{"leader": "timed-out", "seconds": pytest.approx(
        2 * cluster.session_timeout + 5.0, abs=0.2)}]
    assert "n5" not in value


def test_no_partition_means_no_target():
    cluster, nemesis, _ = setup()
    cluster.zk.znodes = {}
    assert nemesis.invoke(cluster, {"f": "kill-new-leader", "value": "leader"}
                          )["value"] == "no-target"


def test_crash_lose_unflushed_takes_every_replica_of_a_partition_at_once():
    cluster = FakeCluster()
    crash = CrashLoseUnflushedNemesis(random.Random(0))
    value = crash.invoke(cluster, {"f": "crash-lose-unflushed", "value": "replicas"})["value"]
    assert value == {"topic": "t", "partition": 0, "n4": "crashed", "n5": "crashed",
                     "n1": "crashed"}
    assert crash.invoke(cluster, {"f": "crash-lose-unflushed", "value": "leader"}
                        )["value"] == "no-target"
    assert crash.invoke(cluster, {"f": "power-on"})["value"] == {
        "n1": "started", "n4": "started", "n5": "started"}
    assert crash.invoke(cluster, {"f": "power-on"})["value"] == "not-started"


def test_faults_groups_and_what_they_need():
    assert expand("targeted") == ["shrink-isr-kill-leader", "shrink-isr-isolate-leader",
                                  "kill-new-leader", "strand-follower", "depose-coordinator"]
    assert "crash-lose-unflushed" not in GROUPS["all"], "all must run without the knob"
    assert set(GROUPS["targeted"]) <= set(GROUPS["all"])
    assert FAULTS["crash-lose-unflushed"].stop == "power-on"
    assert LosesUnflushed in FAULTS["crash-lose-unflushed"].needs
    assert {Killable, HasLeaders, PartitionableNetwork} <= set(
        FAULTS["shrink-isr-kill-leader"].needs)


def test_package_stops_targeted_faults_with_one_heal():
    pkg = package("targeted,crash-lose-unflushed", seed=3, time_limit=120, interval=5)
    assert [op["f"] for op in pkg.final_generator] == ["heal-targeted", "power-on", "heal"]
    starts = {op["f"] for op in pkg.generator}
    assert starts <= {"shrink-isr", "kill-new-leader", "strand-follower", "depose-coordinator",
                      "crash-lose-unflushed", "heal-targeted", "power-on"}
    assert {"shrink-isr", "kill-new-leader"} <= starts


def test_targets_skip_internal_topics_unless_named():
    cluster = FakeCluster()
    zk = type(cluster.zk)()
    zk.znodes = {**zk.znodes,
                 "/brokers/topics/__consumer_offsets": b'{"partitions":{"0":[2,3]}}',
                 "/brokers/topics/__consumer_offsets/partitions": b"",
                 "/brokers/topics/__consumer_offsets/partitions/0": b"",
                 "/brokers/topics/__consumer_offsets/partitions/0/state":
                     b'{"leader":2,"leader_epoch":0,"isr":[2,3]}'}
    cluster.zk = zk
    picked = {leader_and_followers(cluster, random.Random(i), internal=False)[0].topic
              for i in range(20)}
    assert picked == {"t"}
    assert leader_and_followers(cluster, random.Random(0), "__consumer_offsets",
                                internal=False)[1] == "n2"


def test_isolate_leader_cuts_a_leader_off_every_node():
    from nemesis.partition import PartitionNemesis

    cluster = FakeCluster()
    done = PartitionNemesis(Firewall(), random.Random(0)).invoke(
        cluster, {"f": "start-partition", "value": "leader"})
    assert done["value"]["n4"] == ["n1", "n2", "n3", "n5", "z1"]
    assert FAULTS["isolate-leader"].values == ("leader",)
    assert "isolate-leader" not in GROUPS["partition"], "the partition group keeps its seeds"


def test_an_offline_partition_is_waited_through_to_its_unclean_election():
    cluster, nemesis, clock = setup()
    react = cluster.zk._react

    def kafka_like() -> None:  # leader -1 at the next epoch first, the election 1 s later
        state = cluster.zk.state
        if state["leader"] == 4 and not cluster.running("n4"):
            state.update(leader=-1, leader_epoch=4, isr=[4])
            cluster.zk.offline_since = clock.now
        elif state["leader"] == -1 and clock.now - cluster.zk.offline_since >= 1.0:
            state.update(leader=5, leader_epoch=5, isr=[5])
        elif state["leader"] != -1:
            react()

    cluster.zk._react = kafka_like
    value = nemesis.invoke(cluster, {"f": "shrink-isr", "value": "kill"})["value"]
    assert value["elections"][0]["leader"] == "n5" and value["elections"][0]["leader_epoch"] == 5
    cluster.zk._react = lambda: None
    cluster.zk.state.update(leader=-1, leader_epoch=9)
    offline = nemesis._next_election(cluster, nemesis_state(cluster), nemesis_state(cluster, 8))
    assert offline["leader"] is None and offline["leader_epoch"] == 9


def nemesis_state(cluster, epoch=None):
    from nemesis.capabilities import PartitionState

    return PartitionState("t", 0, 4, 3 if epoch is None else epoch, (4, 5, 1), (4, 5, 1))


class Coordinated:
    """A workload with one consumer group, "g"."""

    topic = "t"

    def consumer_pids(self) -> list[int]:
        return []

    def groups(self) -> list[str]:
        return ["g"]

    def transactional_ids(self) -> list[str]:
        return []


def deposing(coordinator: str) -> tuple[FakeCluster, TargetedNemesis, Clock, list]:
    """A cluster whose db names `coordinator` for group "g", coordinated from t-0 (leader
    n4); the nemesis records the cut in force at each sleep."""
    cluster, _, clock = setup()
    cluster.coordinator = lambda key, kind="group": coordinator
    cluster.coordinator_partition = lambda key, kind="group": ("t", 0)
    consumers = Consumers()
    consumers.attach(Coordinated())
    cuts: list = []

    def sleep(seconds: float) -> None:
        cuts.append((seconds, dict(cluster.remote.drops)))
        clock.sleep(seconds)

    return cluster, TargetedNemesis(Firewall(), random.Random(1), clock, sleep,
                                    consumers=consumers), clock, cuts


def test_depose_coordinator_isolates_it_until_another_leads_its_partition_then_lifts_the_cut():
    cluster, nemesis, _, cuts = deposing("n4")
    value = nemesis.invoke(cluster, {"f": "depose-coordinator", "value": "coordinator"})["value"]
    assert value["group"] == "g" and value["coordinator"] == "n4"
    assert (value["topic"], value["partition"]) == ("t", 0)
    assert value["elections"][0]["leader"] == "n5" and value["elections"][0]["leader_epoch"] == 4
    held = [drops for seconds, drops in cuts if seconds == DEPOSED_SECONDS]
    assert held and held[0]["n4"] == {"n1", "n2", "n3", "n5", "z1"}, "cut while deposed"
    assert cluster.running("n4") and not any(cluster.remote.drops.values()), "lifted after"


def test_depose_coordinator_without_groups_or_a_leading_coordinator_does_nothing():
    cluster, nemesis, _, cuts = deposing("n5")
    assert nemesis.invoke(cluster, {"f": "depose-coordinator"})["value"] == "no-target"
    lone = TargetedNemesis(Firewall(), random.Random(1))
    assert lone.invoke(cluster, {"f": "depose-coordinator"})["value"] == {
        "skipped": NO_COORDINATED}
    assert not cuts and not any(cluster.remote.drops.values())


def test_a_coordinator_is_preferred_where_it_leads_no_workload_partition():
    from nemesis.capabilities import PartitionState, Snapshot
    from nemesis.targets import coordinator_target, leads_no_data

    class Coordinators:
        brokers = ("n1", "n2", "n3")

        def coordinator(self, key, kind="group"):
            return {"g0": "n1", "g1": "n2", "g2": "n3"}[key]

        def broker_node(self, broker_id):
            return f"n{broker_id}"

        def snapshot(self):
            return Snapshot(1, 1, frozenset({1, 2, 3}), (
                PartitionState("kchaos", 0, 1, 0, (1, 2, 3), (1, 2, 3)),
                PartitionState("kchaos", 1, 3, 0, (3, 1, 2), (3, 1, 2)),
                PartitionState("__consumer_offsets", 0, 2, 0, (2, 3, 1), (2, 3, 1))))

    cluster = Coordinators()
    keys = [("group", "g0"), ("group", "g1"), ("group", "g2")]
    prefer = leads_no_data(cluster)
    for seed in range(10):
        assert coordinator_target(cluster, keys, random.Random(seed), prefer) == (
            {"group": "g1"}, "n2")
    unpreferred = [("group", "g0"), ("group", "g2")]
    assert coordinator_target(cluster, unpreferred, random.Random(1), prefer)[1] in ("n1", "n3")
