"""The seeded defect `kchaos.debug.ack-commit-before-replication`: off by default; with it
the offsets store answers a commit right after the leader's append. Unit tests on a fake
partition, and a cluster of three brokers where a commit is acknowledged while the
followers are down (without the knob it is not: test_groups_cluster.py,
`test_commit_is_answered_only_when_durable`)."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field

import pytest

from broker.config import BrokerConfig
from broker.errors import ErrorCode
from broker.group.placement import OFFSETS_TOPIC
from broker.group.store import OffsetsLog
from tests.broker.test_groups_cluster import broker_on, commit, create_topic, fetch, stable_member
from tests.support.brokers import BrokerCluster

KNOB = "kchaos.debug.ack-commit-before-replication"
BASE = ("broker.id=1\nlisteners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093\n"
        "zookeeper.connect=127.0.0.1:2181\nlog.dirs=/tmp/kchaos-knob\n")


@dataclass
class Appended:
    base_offset: int
    last_offset: int


@dataclass
class Purgatory:
    """Waiters that nothing ever completes: no follower fetches."""

    waiting: list[asyncio.Future] = field(default_factory=list)

    def add(self, offset: int) -> asyncio.Future:
        self.waiting.append(asyncio.get_running_loop().create_future())
        return self.waiting[-1]


@dataclass
class LonelyLeader:
    """An offsets partition whose followers never fetch: the high watermark stays put."""

    is_leader: bool = True
    leader_epoch: int = 1
    high_watermark: int = 0
    log_end_offset: int = 0
    delayed_produce: Purgatory = field(default_factory=Purgatory)

    def append_as_leader(self, batch: bytes, required_acks: int) -> Appended:
        self.log_end_offset += 1
        return Appended(self.log_end_offset - 1, self.log_end_offset - 1)


@dataclass
class Replicas:
    partitions: dict = field(default_factory=lambda: {(OFFSETS_TOPIC, 0): LonelyLeader()})


def append(store: OffsetsLog, unreplicated=None) -> int:
    return asyncio.run(store.append(0, [(b"key", b"value")], unreplicated=unreplicated))


def test_the_knob_parses_and_is_off_by_default():
    assert BrokerConfig.from_text(BASE).debug_ack_commit_before_replication is False
    assert BrokerConfig.from_text(BASE + f"{KNOB}=true\n").debug_ack_commit_before_replication


def test_without_the_knob_an_unreplicated_commit_times_out():
    assert append(OffsetsLog(Replicas(), 200, 1 << 20)) == ErrorCode.REQUEST_TIMED_OUT


def test_with_the_knob_an_unreplicated_commit_is_acknowledged_at_once():
    replicas = Replicas()
    store = OffsetsLog(replicas, 60_000, 1 << 20, ack_before_replication=True)
    started = time.monotonic()
    assert append(store) == ErrorCode.NONE
    assert time.monotonic() - started < 1
    assert replicas.partitions[(OFFSETS_TOPIC, 0)].high_watermark == 0


def test_the_knob_tells_each_acknowledgement_the_high_watermark_does_not_cover():
    replicas = Replicas()
    store = OffsetsLog(replicas, 60_000, 1 << 20, ack_before_replication=True)
    told: list[tuple[int, int]] = []
    assert append(store, lambda *acked: told.append(acked)) == ErrorCode.NONE
    assert told == [(0, 0)]  # batch at offset 0, high watermark 0: no follower has it
    replicas.partitions[(OFFSETS_TOPIC, 0)].high_watermark = 5  # replicated at once
    assert append(store, lambda *acked: told.append(acked)) == ErrorCode.NONE
    assert told == [(0, 0)]


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    properties = {
        "offsets.topic.num.partitions": "3",
        "group.initial.rebalance.delay.ms": "0",
        "min.insync.replicas": "2",
        "offsets.commit.timeout.ms": "2000",
        KNOB: "true",
    }
    with BrokerCluster(zookeeper.connect, tmp_path_factory.mktemp("knob"),
                       properties=properties) as running:
        yield running


@pytest.mark.cluster
@pytest.mark.timeout(240)
def test_with_the_knob_a_commit_is_acknowledged_while_the_followers_are_down(cluster):
    create_topic(cluster, "acked-early", 1)
    port, member, generation = stable_member(cluster, "early-group")
    coordinator = broker_on(cluster, port)
    followers = [b for b in cluster.brokers if b != coordinator]
    for broker_id in followers:
        cluster.kill(broker_id)
    try:
        started = time.monotonic()
        errors = commit(port, "early-group", generation, member, {("acked-early", 0): 20})
        assert errors == {("acked-early", 0): ErrorCode.NONE}
        assert time.monotonic() - started < 1.5  # never waited for the 2 s commit timeout
        assert fetch(port, "early-group", [("acked-early", 0)])[1] == {("acked-early", 0): 20}
        [acked] = [e for e in cluster.events() if e["event"] == "commit-acked-unreplicated"
                   and e["group"] == "early-group"]
        assert acked["broker_id"] == coordinator and acked["member"] == member
        assert acked["offsets"] == [["acked-early", 0, 20]]
        assert acked["high_watermark"] <= acked["log_offset"]
    finally:
        for broker_id in followers:
            cluster.start_broker(broker_id)
