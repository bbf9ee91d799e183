"""The metadata quorum from a DescribeQuorum response (kafka-python's dict of it): lags
against the leader's log end, unknown times, errors; against a real KRaft cluster in
tests/harness/test_kafka_kraft_cluster.py."""

from __future__ import annotations

import pytest

from harness.db.quorum import QuorumInfo, ReplicaLag, quorum_info


def replica(replica_id: int, end: int, fetched: int = 1_700_000_000_000) -> dict:
    return {"replica_id": replica_id, "log_end_offset": end, "last_fetch_timestamp": fetched,
            "last_caught_up_timestamp": -1}


def response(**partition) -> dict:
    return {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{
        "partition_index": 0, "error": None, "leader_id": 2, "leader_epoch": 5,
        "high_watermark": 118, "current_voters": [replica(1, 118), replica(2, 120),
                                                  replica(3, 90)],
        "observers": [replica(4, 120, fetched=-1)], **partition}]}]}


def test_each_replica_lags_the_leaders_log_end():
    info = quorum_info(response(), fenced_brokers=[4])
    assert (info.leader_id, info.leader_epoch, info.high_watermark) == (2, 5, 118)
    assert [(r.id, r.log_end_offset, r.lag) for r in info.voters] == [
        (1, 118, 2), (2, 120, 0), (3, 90, 30)]
    assert info.observers == (ReplicaLag(4, 120, 0, None, None),)
    assert info.voters[0].last_fetch_ms == 1_700_000_000_000
    assert info.voters[0].last_caught_up_ms is None
    assert info.fenced_brokers == (4,)
    assert QuorumInfo(**{**info.to_json(), "voters": info.voters,
                         "observers": info.observers, "fenced_brokers": (4,)}) == info


def test_a_version_that_lists_no_fenced_brokers_says_none_not_empty():
    assert quorum_info(response()).fenced_brokers is None
    assert quorum_info(response(), fenced_brokers=[]).fenced_brokers == ()


@pytest.mark.parametrize("body, words", [
    ({"topics": []}, "no __cluster_metadata partition"),
    (response(error="NotLeaderOrFollowerError"), "NotLeaderOrFollowerError"),
])
def test_a_response_without_the_quorum_is_an_error_naming_why(body, words):
    with pytest.raises(ValueError, match=words):
        quorum_info(body)
