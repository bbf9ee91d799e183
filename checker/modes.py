"""The metadata mode a test's cluster ran in, and what its leader elections promise.

- zookeeper: our broker, and Kafka with ZooKeeper (Kafka's default before 4.0). A clean
  election takes a live ISR member; the ISR may shrink to the leader alone, which stays
  its last member and is elected again when it returns. With
  unclean.leader.election.enable=true, once the ISR has no live member, any live replica
  may become leader.
- kraft: KRaft without eligible leader replicas (Kafka 3.3 to 4.0; the default from
  4.0): the same promises.
- kraft-elr: KRaft with eligible leader replicas (KIP-966, on for new clusters from
  Kafka 4.1). The high watermark does not advance while the ISR has fewer than
  min.insync.replicas members, so a replica that leaves the ISR then still holds every
  committed record: it stays an eligible leader replica (ELR), and an election from the
  ELR is clean. An election takes a live ISR member, else an unfenced ELR member, else
  the last known leader (the one ZooKeeper mode would elect again, which Kafka marks as
  leader recovery, unclean, even with unclean elections off); with unclean elections on,
  any other live replica only after all of these.

In every mode acks=all with min.insync.replicas >= 2 and unclean elections off promises
that no acknowledged write is lost (`checker.queue.analysis.promises_no_loss`); the modes
differ in which elections are clean, and so in why a loss is allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["KRAFT", "KRAFT_ELR", "ZOOKEEPER", "MetadataMode", "mode_of"]

KRAFT_DEFAULT_SINCE = (4, 0)
ELR_DEFAULT_SINCE = (4, 1)


@dataclass(frozen=True)
class MetadataMode:
    """Where the cluster kept its metadata and how it elects leaders: `name` as test
    results give it, `title` as a reason names it."""

    name: str
    title: str


ZOOKEEPER = MetadataMode("zookeeper", "ZooKeeper mode")
KRAFT = MetadataMode("kraft", "KRaft without eligible leader replicas")
KRAFT_ELR = MetadataMode("kraft-elr", "KRaft with eligible leader replicas")


def _release(version: str) -> tuple[int, int]:
    """(major, minor) of a Kafka version such as "0.10.2.2" or "4.1.1"; a version that
    does not start so (a build of its own) counts as recent."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found[1]), int(found[2])) if found else (99, 0)


def mode_of(test: Mapping[str, Any]) -> MetadataMode:
    """The mode of the test map `test` (test.json). Our broker (db "kchaos", or none named)
    runs in ZooKeeper mode. Kafka runs in the `metadata` mode recorded, that of the
    started `broker` or else the option asked (`config.db.metadata`), or else its
    version's default (ZooKeeper before 4.0, KRaft from 4.0; a run that recorded no
    version counts as before 4.0); in KRaft, with eligible leader replicas from 4.1."""
    if test.get("db") != "kafka":
        return ZOOKEEPER
    started = test.get("broker") or {}
    asked = (test.get("config") or {}).get("db") or {}
    version = started.get("version") or asked.get("kafka_version")
    release = _release(str(version)) if version else (0, 0)
    metadata = started.get("metadata") or asked.get("metadata")
    kraft = metadata == "kraft" if metadata else release >= KRAFT_DEFAULT_SINCE
    if not kraft:
        return ZOOKEEPER
    return KRAFT_ELR if release >= ELR_DEFAULT_SINCE else KRAFT
