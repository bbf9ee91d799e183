"""Targets resolved from a running db's live state: a partition's leader and followers
(`HasLeaders`), the coordinator of one of the run's groups or transactional ids
(`HasCoordinator`). "The leader of t-0" is whoever it is at fault time."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

from nemesis.capabilities import HasCoordinator, HasLeaders, PartitionState

__all__ = ["COORDINATED_FIELDS", "coordinator_target", "leader_and_followers", "leads_no_data"]


def leader_and_followers(cluster: HasLeaders, rng: random.Random, topic: str | None = None,
                         partition: int | None = None, internal: bool = True,
                         prefer: Callable[[PartitionState], bool] | None = None
                         ) -> tuple[PartitionState, str, list[str]] | None:
    """A partition (the given one, else a random one with a leader and followers, of a topic
    whose name does not start with "__" unless `internal`; one that `prefer` accepts when
    any does), its leader's node and its followers' nodes (the other replicas); None if
    there is none."""
    snapshot = cluster.snapshot()
    if snapshot is None:
        return None
    candidates = [p for p in snapshot.partitions
                  if p.leader >= 0 and len(p.replicas) > 1
                  and (topic is None or p.topic == topic)
                  and (internal or topic is not None or not p.topic.startswith("__"))
                  and (partition is None or p.partition == partition)]
    if not candidates:
        return None
    preferred = [p for p in candidates if prefer is not None and prefer(p)]
    chosen = rng.choice(preferred or candidates)
    followers = [cluster.broker_node(b) for b in chosen.replicas if b != chosen.leader]
    return chosen, cluster.broker_node(chosen.leader), followers


COORDINATED_FIELDS = {"group": "group", "transaction": "transactional_id"}


def coordinator_target(cluster: HasCoordinator, keys: Sequence[tuple[str, str]],
                       rng: random.Random, prefer: Callable[[str], bool] | None = None
                       ) -> tuple[dict[str, str], str] | None:
    """For the first of `keys` ((kind, key): a "group" id or a "transaction"al id), in
    random order, whose coordinator the db names, the first whose node `prefer` accepts
    when any is: ({"group": id} or {"transactional_id": id}, the coordinator's node); None
    if it names none."""
    found: list[tuple[dict[str, str], str]] = []
    for kind, key in rng.sample(list(keys), len(keys)):
        node = cluster.coordinator(key, kind)
        if node is None:
            continue
        if prefer is None or prefer(node):
            return {COORDINATED_FIELDS[kind]: key}, node
        found.append(({COORDINATED_FIELDS[kind]: key}, node))
    return found[0] if found else None


def leads_no_data(cluster: HasLeaders) -> Callable[[str], bool] | None:
    """Nodes that lead no partition of a topic but the internal ones ("__"); None when the
    db does not answer."""
    snapshot = cluster.snapshot()
    if snapshot is None:
        return None
    leading = {cluster.broker_node(p.leader) for p in snapshot.partitions
               if p.leader >= 0 and not p.topic.startswith("__")}
    return lambda node: node not in leading
