"""The metadata quorum of a KRaft cluster as its brokers describe it: DescribeQuorum (the
leader, its epoch, the metadata log's high watermark, and each voter's and observer's log
end offset, lag and last fetch), which a broker forwards to the active controller, and
DescribeCluster's fenced brokers (Kafka 4.0 and later list them), both through
kafka-python's admin client, which speaks these requests; confluent-kafka does not.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from kafka import KafkaAdminClient
from kafka.errors import KafkaError

__all__ = ["QuorumInfo", "ReplicaLag", "describe_quorum", "quorum_info"]

METADATA_TOPIC = "__cluster_metadata"
UNKNOWN_TIME = -1  # Kafka's timestamp of a replica the leader has not heard from


@dataclass(frozen=True)
class ReplicaLag:
    """One replica of the metadata log as its leader sees it: its log end offset, how far
    it is behind the leader's (`lag`, records), and when it last fetched and was last
    caught up (ms since the epoch; None: never, or a version that does not say)."""

    id: int
    log_end_offset: int
    lag: int
    last_fetch_ms: int | None
    last_caught_up_ms: int | None


@dataclass(frozen=True)
class QuorumInfo:
    """The metadata quorum: its leader (the active controller), epoch, high watermark,
    voters and observers (brokers that only fetch the log), and the fenced brokers (None:
    the version does not list them)."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: tuple[ReplicaLag, ...]
    observers: tuple[ReplicaLag, ...]
    fenced_brokers: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def quorum_info(response: Mapping[str, Any],
                fenced_brokers: Sequence[int] | None = None) -> QuorumInfo:
    """The quorum of a DescribeQuorum response (kafka-python's dict of it); ValueError when
    it has no `__cluster_metadata` partition or that partition answers an error."""
    partitions = [partition for topic in response.get("topics") or ()
                  if topic.get("topic_name") == METADATA_TOPIC
                  for partition in topic.get("partitions") or ()]
    if not partitions:
        raise ValueError(f"DescribeQuorum answered no {METADATA_TOPIC} partition")
    partition = partitions[0]
    if partition.get("error"):
        raise ValueError(f"DescribeQuorum of {METADATA_TOPIC}: {partition['error']}")
    voters = partition.get("current_voters") or []
    observers = partition.get("observers") or []
    leader_id = int(partition["leader_id"])
    leader_end = max((int(r["log_end_offset"]) for r in voters
                      if int(r["replica_id"]) == leader_id),
                     default=int(partition["high_watermark"]))
    return QuorumInfo(
        leader_id=leader_id, leader_epoch=int(partition["leader_epoch"]),
        high_watermark=int(partition["high_watermark"]),
        voters=tuple(_replica(r, leader_end) for r in voters),
        observers=tuple(_replica(r, leader_end) for r in observers),
        fenced_brokers=None if fenced_brokers is None else tuple(sorted(fenced_brokers)))


def _replica(state: Mapping[str, Any], leader_end: int) -> ReplicaLag:
    end = int(state["log_end_offset"])
    return ReplicaLag(int(state["replica_id"]), end, max(leader_end - end, 0),
                      _time(state.get("last_fetch_timestamp")),
                      _time(state.get("last_caught_up_timestamp")))


def _time(value: Any) -> int | None:
    return None if value is None or int(value) == UNKNOWN_TIME else int(value)


def describe_quorum(bootstrap_servers: Sequence[str], timeout: float = 10.0) -> QuorumInfo:
    """The quorum as the cluster at `bootstrap_servers` describes it; ValueError naming
    what failed when it cannot (no broker answers, not a KRaft cluster, an error)."""
    timeout_ms = int(timeout * 1000)
    try:
        admin = KafkaAdminClient(bootstrap_servers=list(bootstrap_servers),
                                 client_id="kchaos-quorum", request_timeout_ms=timeout_ms)
    except KafkaError as error:
        raise ValueError(f"no broker of {','.join(bootstrap_servers)} answers: "
                         f"{error}") from error
    try:
        response = admin.describe_metadata_quorum()
        cluster = admin.describe_cluster()
    except KafkaError as error:
        raise ValueError(f"DescribeQuorum failed: {type(error).__name__}: {error}") from error
    finally:
        admin.close()
    brokers = cluster.get("brokers") or []
    fenced = ([int(b["broker_id"]) for b in brokers if b.get("is_fenced")]
              if any("is_fenced" in b for b in brokers) else None)
    return quorum_info(response, fenced)
