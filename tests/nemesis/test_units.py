"""Pure nemesis logic: grudges, names, composition, schedules, and nemeses on a FakeRemote."""

from __future__ import annotations

import itertools
import json
import random
from dataclasses import replace

import pytest

import nemesis
from harness.db.znodes import parse_assignment, parse_partition_state
from nemesis import grudge as g
from nemesis.package import (
    FAULTS,
    GROUPS,
    Schedule,
    Staggered,
    Step,
    compose,
    expand,
    fit_round,
    package,
    schedule_steps,
)
from nemesis.partition import Firewall, PacketLossNemesis, PartitionNemesis
from nemesis.process import KillNemesis, PauseNemesis, PauseZooKeeperNemesis
from tests.support.fake_cluster import NODES, FakeCluster


def sees(grudge, node):
    return {other for other in NODES if g.reachable(grudge, node, other)}


def test_halves_cut_everything_across_and_nothing_within():
    grudge = g.halves(NODES)
    assert g.describe(grudge) == {"n1": ["n3", "n4", "n5"], "n2": ["n3", "n4", "n5"],
                                  "n3": ["n1", "n2"], "n4": ["n1", "n2"], "n5": ["n1", "n2"]}


def test_one_way_drops_one_direction_only():
    grudge = g.one_way(["n1", "n2"], ["n3"])
    assert g.describe(grudge) == {"n1": ["n3"], "n2": ["n3"]}
    assert "n1" not in grudge.get("n3", ())
    assert not g.reachable(grudge, "n3", "n1") and not g.reachable(grudge, "n1", "n3"), (
        "TCP needs both directions")
    assert g.reachable(grudge, "n1", "n2")


def test_firewall_rules_take_addresses_as_they_are_and_resolve_node_names():
    from harness.control.firewall import firewall_rules

    script = firewall_rules("t", ["n2", "10.9.8.1"], {}, {"n2": "10.9.8.12"}.__getitem__)
    assert "ip saddr { 10.9.8.1, 10.9.8.12 } drop" in script


def test_isolate_and_between():
    assert g.describe(g.isolate("n3", NODES))["n3"] == ["n1", "n2", "n4", "n5"]
    cut = g.between(["n1"], ["n2", "n3"])
    assert g.describe(cut) == {"n1": ["n2", "n3"], "n2": ["n1"], "n3": ["n1"]}
    assert g.reachable(cut, "n2", "n3") and g.reachable(cut, "n1", "n4")
    with pytest.raises(ValueError):
        g.between(["n1"], ["n1", "n2"])


@pytest.mark.parametrize("n", [4, 5, 6, 7, 8, 9])
def test_majorities_ring_every_node_sees_a_distinct_majority(n):
    nodes = [f"n{i}" for i in range(1, n + 1)]
    grudge = g.majorities_ring(nodes)
    views = [frozenset(o for o in nodes if g.reachable(grudge, node, o)) for node in nodes]
    assert all(len(view) > n // 2 for view in views)
    assert len(set(views)) == n
    assert all(grudge[a].__contains__(b) == grudge[b].__contains__(a)
               for a, b in itertools.combinations(nodes, 2))


def test_bridge_node_sees_both_halves_which_do_not_see_each_other():
    grudge = g.bridge(NODES)
    assert sees(grudge, "n3") == set(NODES)
    assert sees(grudge, "n1") == {"n1", "n2", "n3"}
    assert sees(grudge, "n5") == {"n3", "n4", "n5"}


def test_merge_is_a_union():
    merged = g.merge(g.between(["n1"], ["n2"]), g.between(["n1"], ["n3"]))
    assert merged["n1"] == {"n2", "n3"} and merged["n2"] == {"n1"}


def test_expand_names_and_groups():
    assert expand("partition-one,kill") == ["partition-one", "kill"]
    assert expand("partition") == list(GROUPS["partition"])
    assert set(expand("all")) == set(FAULTS) - {"crash-lose-unflushed", "crash-vm", "pause-vm",
                                                "isolate-clients", "clock-bump", "clock-strobe"}
    assert expand("none") == []
    with pytest.raises(ValueError, match="unknown nemesis 'nope'"):
        expand("kill,nope")
    issue_names = {"partition-one", "partition-halves", "partition-ring", "partition-bridge",
                   "isolate-controller", "isolate-zookeeper", "leader-from-followers",
                   "packet-loss", "kill", "kill-controller", "kill-leader", "kill-all",
                   "restart", "pause", "pause-zookeeper", "expire-session",
                   "kill-coordinator", "isolate-coordinator", "pause-consumers",
                   "add-partitions", "isolate-leader", "shrink-isr-kill-leader",
                   "shrink-isr-isolate-leader", "kill-new-leader", "strand-follower",
                   "depose-coordinator", "crash-lose-unflushed", "crash-vm", "pause-vm",
                   "stall-producer", "partition-quorum", "fence-broker",
                   "kill-quorum-majority", "partition-one-way", "isolate-clients",
                   "clock-bump", "clock-strobe"}
    assert set(FAULTS) == issue_names


def test_compose_rejects_two_nemeses_claiming_one_f():
    firewall = Firewall()
    with pytest.raises(ValueError, match="two nemeses claim"):
        compose([PartitionNemesis(firewall, random.Random()),
                 PartitionNemesis(firewall, random.Random())])


def planned_starts(steps) -> list[float]:
    """Seconds at which each step starts if every op took no time."""
    starts, elapsed = [], 0.0
    for step in steps:
        elapsed += step.wait
        starts.append(elapsed)
        elapsed += step.hold or 0.0
    return starts


def test_schedule_is_seeded_and_pure():
    steps = schedule_steps(expand("all"), seed=11, time_limit=300, interval=5)
    assert steps == schedule_steps(expand("all"), seed=11, time_limit=300, interval=5)
    assert steps != schedule_steps(expand("all"), seed=12, time_limit=300, interval=5)
    assert planned_starts(steps)[-1] < 300
    first = list(Staggered(steps, 300 * 10**9))
    assert all(op["type"] == "info" and op["process"] == "nemesis" for op in first)
    starts = {FAULTS[name].start for name in FAULTS}
    stops = {FAULTS[name].stop for name in FAULTS}
    for op, following in itertools.pairwise(first):
        if op["f"] in stops:
            assert following["f"] in starts


COORDINATOR_FAULTS = "kill-coordinator,isolate-coordinator,pause-consumers,add-partitions"


@pytest.mark.parametrize("seed", range(20))
def test_every_asked_fault_starts_once_when_the_interval_does_not_fit(seed):
    """Four faults at the default 10 s interval in 20 s: each starts, before the limit."""
    pack = package(COORDINATOR_FAULTS, seed=seed, time_limit=20)
    steps = pack.generator.steps
    assert set(COORDINATOR_FAULTS.split(",")) <= {step.name for step in steps}
    first_round = steps[:4]
    assert {step.name for step in first_round} == set(COORDINATOR_FAULTS.split(","))
    assert sum(step.wait + (step.hold or 0.0) for step in first_round) <= 0.9 * 20 + 1e-9
    assert planned_starts(steps)[-1] < 20
    assert pack.note is not None and "--time-limit 20 s" in pack.note \
        and "--nemesis-interval 10 s" in pack.note
    assert package(COORDINATOR_FAULTS, seed=seed, time_limit=60, interval=3).note is None


def test_a_group_is_one_entry_of_a_round():
    """The default `partition,kill,pause` fits 60 s: a partition, a kill and a pause."""
    for seed in range(10):
        pack = package("partition,kill,pause", seed=seed, time_limit=60)
        assert pack.note is None
        names = {op["fault"] for op in pack.generator}
        assert {"kill", "pause"} <= names
        assert any(name.startswith(("partition-", "isolate-")) or name == "leader-from-followers"
                   for name in names)


def test_a_round_is_shortened_keeping_minimum_holds():
    steps = [Step("pause-consumers", "one", 10.0, 12.0), Step("kill", "one", 10.0, 10.0)]
    fitted = fit_round(steps, 20.0, {"pause-consumers": 8.0})
    assert sum(step.wait + step.hold for step in fitted) == pytest.approx(18.0)
    assert fitted[0].hold >= 8.0
    assert fit_round(steps, 100.0, {"pause-consumers": 8.0}) == steps


def test_faults_whose_holds_cannot_fit_are_refused():
    with pytest.raises(ValueError, match="raise --time-limit above 9 s"):
        package("pause-consumers", seed=1, time_limit=8)


def run_schedule(schedule, op_seconds, time_limit):
    """Drive a nemesis generator as the interpreter does, each op taking `op_seconds`
    (a function of the op) to complete; [(op, invoked, completed)] in seconds."""
    done, now = [], 0.0
    while True:
        result = schedule.op(None, {"time": int(now * 1e9)})
        if result is None or result[0]["time"] >= time_limit * 1e9:
            return done
        op, schedule = result
        now = op["time"] / 1e9
        schedule = schedule.update(None, {"time": op["time"]}, op)
        invoked, now = now, now + op_seconds(op)
        schedule = schedule.update(None, {"time": int(now * 1e9)}, {**op, "value": "done"})
        done.append((op, invoked, now))


def test_a_slow_op_delays_the_ops_after_it_instead_of_bunching_them():
    """Each wait runs from the previous op's completion, each hold from its start's."""
    steps = (Step("kill", "one", 2.0, 3.0), Step("pause", "one", 4.0, 5.0))
    ran = run_schedule(Staggered(steps, 100 * 10**9),
                       lambda op: 15.0 if op["f"] == "kill" else 0.5, 100)
    assert [(op["f"], invoked) for op, invoked, _ in ran] == [
        ("kill", 2.0), ("start", 20.0), ("pause", 24.5), ("resume", 30.0)]
    assert [op["fault"] for op, *_ in ran] == ["kill", "kill", "pause", "pause"]


@pytest.mark.parametrize("seed", range(5))
def test_slow_faults_keep_their_waits_and_holds_and_start_before_the_limit(seed):
    pack = package("kill,pause,partition", seed=seed, time_limit=60, interval=5)
    ran = run_schedule(pack.generator, lambda op: 12.0, 60)
    steps = iter(pack.generator.steps)
    previous = 0.0
    for op, invoked, completed in ran:
        fault = FAULTS[op["fault"]]
        if op["f"] == fault.start:
            step = next(steps)
            assert invoked == pytest.approx(previous + step.wait) and invoked < 60
        else:
            assert invoked == pytest.approx(min(previous + step.hold, 60 - 1e-9))
        previous = completed
    assert ran and ran[-1][0]["f"] == FAULTS[ran[-1][0]["fault"]].stop


def test_nothing_starts_after_the_time_limit_and_a_started_fault_stops_by_it():
    steps = (Step("kill", "one", 1.0, 1.0), Step("pause", "one", 5.0, 1.0))
    ran = run_schedule(Staggered(steps, 10 * 10**9), lambda op: 3.0, 10)
    assert [(op["f"], invoked) for op, invoked, _ in ran] == [("kill", 1.0), ("start", 5.0)]
    held = Staggered((Step("kill", "one", 2.0, 50.0),), 10 * 10**9)
    assert [(op["f"], op["time"]) for op, *_ in run_schedule(held, lambda op: 1.0, 10)] == [
        ("kill", 2 * 10**9), ("start", 10 * 10**9 - 1)]


def test_while_an_op_runs_the_next_is_offered_no_earlier_than_its_wait_from_now():
    schedule = Staggered((Step("kill", "one", 1.0, 4.0),), 60 * 10**9)
    op, schedule = schedule.op(None, {"time": 0})
    schedule = schedule.update(None, {"time": op["time"]}, op)
    offered, _ = schedule.op(None, {"time": 7 * 10**9})
    assert offered["f"] == "start" and offered["time"] == 11 * 10**9
    assert Staggered((Step("kill", "one", 70.0, None),), 60 * 10**9).op(None, {"time": 0}) is None


def test_schedule_generator_walks_its_ops_and_never_goes_back_in_time():
    schedule = Schedule(({"f": "kill", "time": 5}, {"f": "start", "time": 10}))
    op, schedule = schedule.op(None, {"time": 7})
    assert op == {"f": "kill", "time": 7}
    op, schedule = schedule.op(None, {"time": 8})
    assert op == {"f": "start", "time": 10}
    assert schedule.op(None, {"time": 9}) is None


def test_package_final_generator_stops_every_fault_then_heals():
    pack = package("partition-one,kill-leader,pause-zookeeper", seed=1)
    assert [op["f"] for op in pack.final_generator] == [
        "stop-partition", "start", "resume-zookeeper", "heal"]
    assert {"heal", "start-partition", "kill", "pause-zookeeper"} <= pack.nemesis.fs
    assert [p["name"] for p in pack.perf] == list(pack.faults)
    assert json.dumps(list(pack.generator))
    assert nemesis.noop().nemesis.fs == {"heal"}








def test_partition_nemesis_resolves_controller_and_leader_and_firewalls_both_sides():
    cluster = FakeCluster()
    partitioner = PartitionNemesis(Firewall(), random.Random(3))
    done = partitioner.invoke(cluster, {"type": "info", "f": "start-partition",
                                        "value": "controller"})
    assert done["type"] == "info"
    assert done["value"]["n2"] == ["n1", "n3", "n4", "n5", "z1"]
    assert cluster.remote.drops["n1"] == {"n2"}
    done = partitioner.invoke(cluster, {"f": "start-partition",
                                        "value": "leader-from-followers"})
    assert done["value"] == {"n1": ["n4"], "n4": ["n1", "n5"], "n5": ["n4"]}
    assert cluster.remote.drops["n2"] == frozenset()
    healed = partitioner.invoke(cluster, {"f": "stop-partition"})
    assert healed["value"] == "network-healed"
    assert not any(cluster.remote.drops.values())


def test_partition_zookeeper_shape_and_no_target():
    cluster = FakeCluster()
    partitioner = PartitionNemesis(Firewall(), random.Random(3))
    done = partitioner.invoke(cluster, {"f": "start-partition", "value": "zookeeper"})
    assert done["value"]["z1"] == NODES
    cluster.zookeepers = ("n1",)
    cluster.brokers = ("n1",)
    assert partitioner.invoke(cluster, {"f": "start-partition", "value": "zookeeper"}
                              )["value"] == "no-target"


def test_firewall_layers_survive_each_others_heal():
    cluster = FakeCluster()
    firewall = Firewall()
    partitioner = PartitionNemesis(firewall, random.Random(1))
    loss = PacketLossNemesis(firewall)
    partitioner.invoke(cluster, {"f": "start-partition", "value": "controller"})
    loss.invoke(cluster, {"f": "start-packet-loss", "value": {"probability": 0.5}})
    assert cluster.remote.losses["n1"]["n3"] == 0.5
    loss.invoke(cluster, {"f": "stop-packet-loss"})
    assert cluster.remote.drops["n1"] == {"n2"} and cluster.remote.losses["n1"] == {}
    firewall.heal(cluster)
    assert not any(cluster.remote.drops.values())


def test_kill_controller_then_start_everything():
    cluster = FakeCluster()
    killer = KillNemesis(random.Random(0))
    assert killer.invoke(cluster, {"f": "kill", "value": "controller"})["value"] == {
        "n2": "killed"}
    assert not cluster.running("n2")
    assert killer.invoke(cluster, {"f": "kill", "value": "leader"})["value"] == {
        "n4": "killed"}
    assert killer.invoke(cluster, {"f": "start"})["value"] == {"n2": "started",
                                                             "n4": "started"}
    assert killer.invoke(cluster, {"f": "start"})["value"] == "not-started"
    assert killer.invoke(cluster, {"f": "kill", "value": "all"})["value"] == {
        n: "killed" for n in NODES}
    assert killer.invoke(cluster, {"f": "kill", "value": "one"})["value"] == "no-target"


def test_pause_and_resume_brokers_and_zookeeper():
    cluster = FakeCluster()
    pauser = PauseNemesis(random.Random(0))
    paused = pauser.invoke(cluster, {"f": "pause", "value": ["n1", "n3"]})["value"]
    assert paused == {"n1": "paused", "n3": "paused"}
    assert cluster.remote.paused == {cluster.pids["n1"], cluster.pids["n3"]}
    assert pauser.invoke(cluster, {"f": "resume"})["value"] == {"n1": "resumed",
                                                              "n3": "resumed"}
    assert not cluster.remote.paused
    zk = PauseZooKeeperNemesis(random.Random(0))
    assert zk.invoke(cluster, {"f": "pause-zookeeper", "value": "leader"})["value"] == {
        "z1": "paused"}
    assert zk.invoke(cluster, {"f": "resume-zookeeper"})["value"] == {"z1": "resumed"}


def test_parse_kafka_znodes():
    assert parse_assignment(b'{"version":2,"partitions":{"1":[3,1],"0":[1,2]}}') == {
        0: (1, 2), 1: (3, 1)}
    state = parse_partition_state("t", 0, b'{"leader":2,"leader_epoch":5,"isr":[2,1],'
                                          b'"controller_epoch":1,"version":1}', (1, 2))
    assert (state.leader, state.leader_epoch, state.isr, state.replicas) == (2, 5, (2, 1), (1, 2))


def test_exported_members():
    import harness.control
    import harness.db

    assert set(nemesis.__all__) == {"FAULTS", "GROUPS", "Package", "compose", "expand", "noop",
                                    "package"}
    assert "Remote" in harness.control.__all__ and "RemoteError" in harness.control.__all__
    assert set(harness.db.__all__) >= {"Cluster", "ClusterSpec", "down"}


def test_slow_ops_of_a_fitted_round_use_up_the_waits_after_them():
    """A fitted first round keeps its planned starts: ops that take longer than planned
    (a coordinator looked up under load) delay the next start only past its planned time,
    so the last fault still starts before the limit."""
    steps = [Step("kill", "one", 4.0, 4.0), Step("pause", "one", 4.0, 4.0),
             Step("add-partitions", 1, 4.0, None)]
    fitted = fit_round(steps, 20.0, {})
    assert [step.at for step in fitted] == pytest.approx([3.6, 10.8, 18.0])
    ran = run_schedule(Staggered(tuple(fitted), 20 * 10**9), lambda op: 1.0, 20)
    assert [(op["f"], round(invoked, 1)) for op, invoked, _ in ran] == [
        ("kill", 3.6), ("start", 8.2), ("pause", 10.8), ("resume", 15.4),
        ("add-partitions", 18.0)]
    unfitted = Staggered(tuple(replace(step, at=None) for step in fitted), 20 * 10**9)
    assert "add-partitions" not in [op["f"] for op, *_ in
                                    run_schedule(unfitted, lambda op: 1.0, 20)]
