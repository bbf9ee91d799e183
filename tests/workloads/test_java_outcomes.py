"""The Java client's send outcomes on a real 3-broker cluster (our broker): each class of
exception it raises becomes the completion docs/workloads.md's table says."""

from __future__ import annotations

import signal

import pytest

from tests.support.brokers import BrokerCluster
from tests.support.java_client import java_runtime
from workloads.kafka.client import ClientOptions, send_completion
from workloads.kafka.java.client import JavaClient, deliveries

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]

TOPIC = "outcomes"


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with BrokerCluster(zookeeper.connect, tmp_path_factory.mktemp("java-outcomes"),
                       properties={"min.insync.replicas": "2"}) as running:
        yield running


@pytest.fixture
def client(cluster):
    options = ClientOptions(
        bootstrap_servers=tuple(b.bootstrap for b in cluster.brokers.values()),
        topic=TOPIC, key_partitions={0: 0}, op_timeout=3.0, java=java_runtime())
    factory = JavaClient(options)
    factory.setup({})
    opened = factory.open({}, None)
    yield opened
    opened.close({})
    factory.teardown({})


def send(client: JavaClient, topic: str, value: str) -> dict:
    """One record through the child, completed as a send op of the workload is."""
    op = {"process": 0, "f": "send", "value": [["send", 0, 1]]}
    answer = client._request("send", records=[[topic, 0, "0", value]])
    return {**send_completion(op, deliveries(answer), retried=False), "answer": answer}


def test_an_acknowledged_send_is_ok_with_its_offset(client):
    done = send(client, TOPIC, "1")
    assert done["type"] == "ok"
    assert done["value"][0][2][0] >= 0


def test_a_record_over_the_request_size_is_a_definite_failure(client):
    done = send(client, TOPIC, "x" * 2_000_000)
    assert done["answer"][0]["exception"] == "RecordTooLargeException"
    assert (done["type"], done["error"]) == ("fail", "MESSAGE_TOO_LARGE")


def test_an_invalid_topic_is_a_definite_failure(client):
    done = send(client, "not a topic!", "1")
    assert done["answer"][0]["exception"] == "InvalidTopicException"
    assert (done["type"], done["error"]) == ("fail", "INVALID_TOPIC_EXCEPTION")


def test_a_send_that_timed_out_after_its_request_left_is_indeterminate(cluster, client):
    assert send(client, TOPIC, "1")["type"] == "ok"
    leader = cluster.partition_state(TOPIC, 0)["leader"]
    cluster.kill(leader, signal.SIGSTOP)
    try:
        done = send(client, TOPIC, "2")
    finally:
        cluster.kill(leader, signal.SIGCONT)
    assert done["answer"][0].get("sent", True), done
    assert done["type"] == "info", done
    assert done["error"] in ("REQUEST_TIMED_OUT", "timeout", "NETWORK_EXCEPTION"), done


def test_a_record_that_never_had_its_topics_metadata_is_a_definite_failure(cluster, client):
    for broker_id in cluster.brokers:
        cluster.kill(broker_id, signal.SIGSTOP)
    try:
        done = send(client, "never-seen", "1")
    finally:
        for broker_id in cluster.brokers:
            cluster.kill(broker_id, signal.SIGCONT)
    assert done["answer"][0]["exception"] == "TimeoutException"
    assert done["answer"][0]["sent"] is False
    assert done["type"] == "fail", done
