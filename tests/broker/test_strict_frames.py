"""A request whose fields do not match the bytes of its frame is never acted on: a Metadata
request truncated inside a topic name must not auto-create the prefix (`f`, `fu`, `fuz`),
and bytes left over after the body are refused too."""

from __future__ import annotations

import time

import pytest
from kafka.protocol.metadata import MetadataRequest

from tests.support.brokers import BrokerCluster
from tests.support.wire import exchange, frame, request_frame

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(180)]



@pytest.fixture(scope="module")
def broker(zookeeper, tmp_path_factory):
    with BrokerCluster(zookeeper.connect, tmp_path_factory.mktemp("strict"), size=1) as cluster:
        yield cluster


def topics(cluster: BrokerCluster) -> set[str]:
    return set(cluster.zk.get_children("/brokers/topics"))


def metadata_frame(version: int, name: str) -> bytes:
    Topic = MetadataRequest.MetadataRequestTopic
    request = MetadataRequest[version](topics=[Topic(name=name)])
    if version >= 4:
        request.allow_auto_topic_creation = True
    return request_frame(request, correlation_id=version, client_id="strict")


def settle(cluster: BrokerCluster, before: set[str]) -> set[str]:
    """Topics created since `before`, after the broker had a moment to act."""
    time.sleep(0.3)
    return topics(cluster) - before


@pytest.mark.parametrize("version", [0, 1, 4, 8, 9])
def test_truncated_topic_name_creates_no_topic(broker, version):
    port = broker.brokers[1].port
    name = "abcdefghij"[version] + "-fuzzy-name"  # prefixes distinct per version
    whole = metadata_frame(version, name)
    name_at = whole.index(name.encode())
    before = topics(broker)
    for kept in (1, 2, 3, len(name) - 1):
        exchange(port, frame(whole[: name_at + kept]), timeout=2)
    assert settle(broker, before) == set()
    # the whole request is acted on
    exchange(port, frame(whole), timeout=5)
    assert name in topics(broker)


@pytest.mark.parametrize("version", [1, 9])
def test_bytes_after_the_body_are_refused(broker, version):
    port = broker.brokers[1].port
    name = f"overlong-v{version}"
    before = topics(broker)
    exchange(port, frame(metadata_frame(version, name) + b"\x00\x00\x00"), timeout=2)
    assert settle(broker, before) == set()
    # the same request without the trailing bytes is acted on
    exchange(port, frame(metadata_frame(version, name)), timeout=5)
    assert name in topics(broker)
