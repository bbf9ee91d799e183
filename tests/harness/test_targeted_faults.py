"""shrink-isr-kill-leader against a live cluster of our broker on namespaces: with writes
flowing, the leader cut off from its followers shrinks the ISR to itself, is killed, and
the controller elects a follower out of sync (unclean election enabled); heal-targeted
restarts it. Needs root."""

from __future__ import annotations

import random
import threading

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from harness.db import Cluster, ClusterSpec
from nemesis.partition import Firewall
from nemesis.targeted import TargetedNemesis
from tests.support import requirements
from tests.support.cleanup import assert_nothing_left

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(180),
    requirements.root(),
]


def test_shrink_isr_then_kill_the_leader_elects_an_out_of_sync_follower(tmp_path):
    spec = ClusterSpec(brokers=3, zookeepers=1, broker_config={
        "zookeeper.session.timeout.ms": "4000", "replica.lag.time.max.ms": "2000",
        "unclean.leader.election.enable": "true", "min.insync.replicas": "1"})
    with Cluster.up(spec, tmp_path / "state") as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
        admin.create_topics([NewTopic("t", 1, 3)])["t"].result(30)
        stop = threading.Event()
        writer = threading.Thread(target=write_until, args=(cluster, stop), daemon=True)
        writer.start()
        try:
            nemesis = TargetedNemesis(Firewall(), random.Random(0))
            done = nemesis.invoke(cluster, {"type": "info", "process": "nemesis",
                                            "f": "shrink-isr", "value": {
                                                "then": "kill", "topic": "t", "partition": 0}})
        finally:
            stop.set()
            writer.join(10)
        value = done["value"]
        leader = value["leader"]
        assert value["isr_shrunk"], value
        assert value["shrink_seconds"] < 2.0 + 5.0
        assert value[leader] == "killed" and not cluster.running(leader)
        election = value["elections"][0]
        assert election["leader"] in value["followers"], "out of the ISR: unclean"
        healed = nemesis.invoke(cluster, {"f": "heal-targeted"})["value"]
        assert healed == {"healed": True, "started": [leader]}
        cluster.broker_set.wait_healthy(timeout=60)
    assert_nothing_left(cluster.prefix)


def write_until(cluster: Cluster, stop: threading.Event) -> None:
    """acks=1 writes to t-0 every 20 ms: a follower cut off falls behind the leader."""
    producer = Producer({"bootstrap.servers": cluster.bootstrap_servers, "acks": "1",
                         "message.timeout.ms": 3000})
    i = 0
    while not stop.wait(0.02):
        producer.produce("t", str(i).encode(), partition=0)
        producer.poll(0)
        i += 1
    producer.flush(5)
