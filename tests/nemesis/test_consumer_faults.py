"""Consumer-group faults without a cluster: their names and schedule, the coordinator
faults over a FakeCluster, pause-consumers over real `sleep` child processes,
add-partitions with a fake CreatePartitions, and stall-producer's answers."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import pytest

from nemesis.consumers import (
    MAX_ADDITIONS,
    NO_COORDINATED,
    NO_STALLS,
    AddPartitionsNemesis,
    Consumers,
    ConsumerTargets,
    PauseConsumersNemesis,
    StallProducerNemesis,
)
from nemesis.package import FAULTS, GROUPS, Staggered, expand, package, schedule_steps
from nemesis.partition import Firewall, PartitionNemesis
from nemesis.process import KillNemesis
from tests.support.fake_cluster import FakeCluster
from workloads.core.part import Workload

NEW_FAULTS = ("kill-coordinator", "isolate-coordinator", "pause-consumers", "add-partitions")


class Targets:
    """A workload's side of `ConsumerTargets`."""

    def __init__(self, pids: list[int], groups: list[str], topic: str = "kchaos",
                 txn_ids: tuple[str, ...] = ()) -> None:
        self.pids = pids
        self.group_ids = groups
        self.topic = topic
        self.txn_ids = txn_ids

    def consumer_pids(self) -> list[int]:
        return list(self.pids)

    def groups(self) -> list[str]:
        return list(self.group_ids)

    def transactional_ids(self) -> list[str]:
        return list(self.txn_ids)


class CoordinatedCluster(FakeCluster):
    """FakeCluster whose db names n3 as the coordinator of group "g1" and n4 as that of
    transactional id "t1" (and none of any other key)."""

    bootstrap_servers = "n1:9092"

    def coordinator(self, key: str, kind: str = "group") -> str | None:
        return {("group", "g1"): "n3", ("transaction", "t1"): "n4"}.get((kind, key))


def consumers_of(targets: object, session_timeout: float = 6.0) -> Consumers:
    consumers = Consumers(session_timeout)
    consumers.attach(targets)
    return consumers


def state(pid: int) -> str:
    """The process state letter of /proc/<pid>/stat (T: stopped)."""
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def settled(pids, check, timeout: float = 2.0) -> bool:
    """Whether `check(states of pids)` holds within `timeout` (signals land asynchronously)."""
    deadline = time.monotonic() + timeout
    while not check([state(pid) for pid in pids]):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


@pytest.fixture
def sleepers():
    processes = [subprocess.Popen(["sleep", "60"]) for _ in range(3)]
    yield [p.pid for p in processes]
    for process in processes:
        process.kill()
        process.wait(timeout=10)


def test_new_faults_are_named_in_all_and_scheduled_with_their_stops():
    assert set(NEW_FAULTS) <= set(GROUPS["all"])
    assert expand("kill-coordinator,pause-consumers") == ["kill-coordinator", "pause-consumers"]
    assert FAULTS["kill-coordinator"].start == "kill" and FAULTS["kill-coordinator"].stop == "start"
    assert FAULTS["isolate-coordinator"].stop == "stop-partition"
    assert FAULTS["add-partitions"].stop is None
    steps = schedule_steps(list(NEW_FAULTS), seed=5, time_limit=600, interval=5)
    ops = list(Staggered(steps, 600 * 10**9))
    fs = [op["f"] for op in ops]
    assert {"kill", "start-partition", "start-pause-consumers", "add-partitions"} <= set(fs)
    assert steps != schedule_steps(list(NEW_FAULTS), seed=5, time_limit=600, interval=5,
                                   holds={"pause-consumers": 8.0})
    for at, op in enumerate(ops):
        if op["f"] == "start-pause-consumers":
            assert op["value"] in ("one", "some") and ops[at + 1]["f"] == "stop-pause-consumers"
        if op["f"] == "kill":
            assert op["value"] == "coordinator" and ops[at + 1]["f"] == "start"
        if op["f"] == "start-partition":
            assert op["value"] == "coordinator" and ops[at + 1]["f"] == "stop-partition"
        if op["f"] == "add-partitions":
            assert op["value"] in (1, 2)


def test_pauses_are_scheduled_to_outlast_the_session_timeout():
    pack = package("pause-consumers", seed=2, time_limit=600, interval=1,
                   consumer_session_timeout=10.0)
    ops = list(pack.generator)
    assert len(ops) > 20
    for start, stop in zip(ops[::2], ops[1::2], strict=True):
        assert (start["f"], stop["f"]) == ("start-pause-consumers", "stop-pause-consumers")
    assert all(step.hold >= 12.0 for step in pack.generator.steps)


def test_package_shares_its_consumers_and_stops_pauses_before_healing():
    pack = package(",".join(NEW_FAULTS), seed=1, consumer_session_timeout=10.0)
    assert [op["f"] for op in pack.final_generator] == [
        "start", "stop-partition", "stop-pause-consumers", "heal"]
    assert pack.consumers.session_timeout == 10.0
    pack.consumers.attach(Targets([], ["g1"]))
    assert pack.nemesis.routes["kill"].consumers is pack.consumers
    assert pack.nemesis.routes["start-partition"].consumers is pack.consumers
    assert {p["name"]: p["start"] for p in pack.perf}["pause-consumers"] == \
        "start-pause-consumers"


def test_consumers_take_only_a_workload_declaring_consumer_targets():
    assert isinstance(Targets([1], ["g"]), ConsumerTargets)
    consumers = consumers_of(object())
    assert (consumers.pids(), consumers.groups(), consumers.topic) == ([], [], None)
    consumers.attach(Targets([7], ["g"], "t"))
    assert (consumers.pids(), consumers.groups(), consumers.topic) == ([7], ["g"], "t")


def test_kill_coordinator_kills_the_coordinator_of_a_group_and_start_restarts_it():
    cluster = CoordinatedCluster()
    killer = KillNemesis(random.Random(0), consumers_of(Targets([], ["g1"])))
    done = killer.invoke(cluster, {"type": "info", "process": "nemesis", "f": "kill",
                                   "value": "coordinator"})
    assert done["value"] == {"group": "g1", "n3": "killed"}
    assert not cluster.running("n3")
    assert killer.invoke(cluster, {"f": "start"})["value"] == {"n3": "started"}


def test_coordinator_faults_act_on_a_transactional_ids_coordinator_too():
    cluster = CoordinatedCluster()
    targets = consumers_of(Targets([], [], txn_ids=("t1",)))
    assert targets.coordinated() == [("transaction", "t1")]
    killer = KillNemesis(random.Random(0), targets)
    done = killer.invoke(cluster, {"f": "kill", "value": "coordinator"})
    assert done["value"] == {"transactional_id": "t1", "n4": "killed"}
    partitioner = PartitionNemesis(Firewall(), random.Random(0), targets)
    cluster.start("n4")
    isolated = partitioner.invoke(cluster, {"f": "start-partition", "value": "coordinator"})
    assert isolated["value"]["transactional_id"] == "t1" and "n4" in isolated["value"]


def test_coordinator_faults_are_logged_no_ops_without_groups_or_coordinator():
    cluster = CoordinatedCluster()
    no_groups = consumers_of(Targets([], []))
    op = {"type": "info", "process": "nemesis", "f": "kill", "value": "coordinator"}
    assert KillNemesis(random.Random(0), no_groups).invoke(cluster, op)["value"] == {
        "skipped": NO_COORDINATED}
    unknown = consumers_of(Targets([], ["g2"]))
    assert KillNemesis(random.Random(0), unknown).invoke(cluster, op)["value"] == "no-target"
    partition = {"f": "start-partition", "value": "coordinator"}
    assert PartitionNemesis(Firewall(), random.Random(0), no_groups).invoke(
        cluster, partition)["value"] == {"skipped": NO_COORDINATED}
    assert all(cluster.running(node) for node in cluster.brokers)


def test_isolate_coordinator_firewalls_it_from_every_node_and_heals():
    cluster = CoordinatedCluster()
    partitioner = PartitionNemesis(Firewall(), random.Random(0),
                                   consumers_of(Targets([], ["g1"])))
    done = partitioner.invoke(cluster, {"f": "start-partition", "value": "coordinator"})
    assert done["value"]["group"] == "g1"
    assert done["value"]["n3"] == ["n1", "n2", "n4", "n5", "z1"]
    assert cluster.remote.drops["n1"] == {"n3"}
    partitioner.invoke(cluster, {"f": "stop-partition"})
    assert not any(cluster.remote.drops.values())


def test_pause_consumers_stops_them_past_the_session_timeout_then_continues(sleepers):
    pauser = PauseConsumersNemesis(consumers_of(Targets(sleepers, ["g"]), 0.5),
                                   random.Random(1))
    started = time.monotonic()
    done = pauser.invoke(FakeCluster(), {"f": "start-pause-consumers", "value": "some"})
    paused = done["value"]["paused"]
    assert paused and set(paused) <= set(sleepers) and done["value"]["seconds"] == 2.5
    assert settled(paused, lambda states: set(states) == {"T"})
    resumed = pauser.invoke(FakeCluster(), {"f": "stop-pause-consumers"})
    assert time.monotonic() - started >= 2.5
    assert resumed["value"] == {"resumed": paused}
    assert settled(sleepers, lambda states: "T" not in states)
    assert pauser.invoke(FakeCluster(), {"f": "stop-pause-consumers"})["value"] == "not-started"


def test_pause_consumers_teardown_continues_at_once(sleepers):
    pauser = PauseConsumersNemesis(consumers_of(Targets(sleepers, ["g"]), 60.0),
                                   random.Random(1))
    pauser.invoke(FakeCluster(), {"f": "start-pause-consumers", "value": "one"})
    assert settled(sleepers, lambda states: states.count("T") == 1)
    started = time.monotonic()
    pauser.teardown(FakeCluster())
    assert time.monotonic() - started < 1
    assert settled(sleepers, lambda states: "T" not in states)


def test_pause_consumers_without_consumer_processes_is_a_logged_no_op():
    pauser = PauseConsumersNemesis(consumers_of(Targets([], ["g"])), random.Random(1))
    done = pauser.invoke(FakeCluster(), {"type": "info", "process": "nemesis",
                                         "f": "start-pause-consumers", "value": "one"})
    assert done["type"] == "info" and "assign mode" in done["value"]["skipped"]


def test_add_partitions_grows_the_topic_at_most_three_times():
    calls = []

    def grow(bootstrap: str, topic: str, more: int) -> tuple[int, int]:
        calls.append((bootstrap, topic, more))
        return 4, 4 + more

    adder = AddPartitionsNemesis(consumers_of(Targets([], ["g"], "queue")), grow)
    cluster = CoordinatedCluster()
    done = adder.invoke(cluster, {"f": "add-partitions", "value": 2})
    assert done["value"] == {"topic": "queue", "partitions": [4, 6]}
    for _ in range(MAX_ADDITIONS):
        last = adder.invoke(cluster, {"f": "add-partitions", "value": 1})
    assert calls == [("n1:9092", "queue", 2), ("n1:9092", "queue", 1), ("n1:9092", "queue", 1)]
    assert "skipped" in last["value"]
    assert "skipped" in AddPartitionsNemesis(Consumers(), grow).invoke(
        cluster, {"f": "add-partitions", "value": 1})["value"]


class Stalls:
    """Producers that take a stall when `takes` names an id."""

    def __init__(self, takes: str | None) -> None:
        self.takes = takes
        self.asked: list[tuple[float, float]] = []

    def stall_next(self, seconds: float, within: float) -> str | None:
        self.asked.append((seconds, within))
        return self.takes


class Stallable(Targets):
    """Targets whose transactional producers in this process are `stalls`."""

    def __init__(self, takes: str | None, txn_ids: tuple[str, ...] = ("t1",),
                 in_process: bool = True) -> None:
        super().__init__([], [], txn_ids=txn_ids)
        self.stalls = Stalls(takes) if in_process else None


def test_stall_producer_says_which_transactional_id_stalled_or_that_none_did():
    op = {"f": "stall-producer", "value": 5.0, "fault": "stall-producer"}
    targets = Stallable("t1")
    done = StallProducerNemesis(consumers_of(targets), within=3.0).invoke(FakeCluster(), op)
    assert done["value"] == {"stalled": "t1", "seconds": 5.0}
    assert targets.stalls.asked == [(5.0, 3.0)]
    assert StallProducerNemesis(consumers_of(Stallable(None))).invoke(
        FakeCluster(), op)["value"] == "no-target"
    transfer = Workload(client=None, generator=None, final_generator=None,
                        key_partitions={}, concurrency=1, txn_ids=("t1",))
    for nothing in (Stallable("t1", txn_ids=()), Stallable("t1", in_process=False),
                    transfer, Targets([], ["g"])):
        assert StallProducerNemesis(consumers_of(nothing)).invoke(FakeCluster(), op)[
            "value"] == {"skipped": NO_STALLS}
    assert FAULTS["stall-producer"].stop is None and "stall-producer" in GROUPS["all"]
