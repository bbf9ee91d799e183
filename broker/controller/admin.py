"""Administrative work of the controller: partition reassignment, preferred-replica elections
(on request and by auto.leader.rebalance) and topic deletion (seeds/000 "Controller" 1-2,
seeds/004 "PartitionLeaderSelector" table).

Reassignment of a partition from OAR (original replicas) to RAR (target), as Kafka's:
  1. assignment := RAR + (OAR - RAR) in ZooKeeper (fenced), with adding/removing recorded;
  2. leader epoch + 1 and LeaderAndIsr to all of them, so new replicas start fetching;
  3. wait until the ISR holds every replica of RAR (checked on ISR change notifications);
  4. assignment := RAR; if the leader is not in RAR (or dead) the reassigned selector elects
     one, else the leader epoch is bumped again;
  5. replicas of OAR - RAR go offline (out of the ISR, StopReplica) and are deleted
     (StopReplica delete=true); ZooKeeper assignment := RAR; the partition leaves
     /admin/reassign_partitions.
"""

from __future__ import annotations

import logging

from kazoo.exceptions import NoNodeError

from broker import zk as zkl
from broker.controller.config import ControllerConfig
from broker.controller.context import ControllerContext, TopicPartition
from broker.controller.election import Selector
from broker.controller.event_log import EventLog
from broker.controller.partitions import PartitionOps, ZkCall
from broker.controller.requests import RequestBatch
from broker.controller.state_machines import PartitionState, ReplicaState

__all__ = ["AdminOps"]

log = logging.getLogger(__name__)


class AdminOps:
    def __init__(self, ctx: ControllerContext, zk_call: ZkCall, batch: RequestBatch,
                 ops: PartitionOps, event_log: EventLog, config: ControllerConfig) -> None:
        self.ctx = ctx
        self.zk = zk_call
        self.batch = batch
        self.ops = ops
        self.event_log = event_log
        self.config = config

    def _eligible(self, tp: TopicPartition) -> bool:
        return (tp in self.ctx.assignments and tp not in self.ctx.reassigning
                and tp[0] not in self.ctx.topics_being_deleted)

    # -- reassignment ----------------------------------------------------------------------

    async def _write_assignment(self, topic: str, adding: dict | None = None,
                                removing: dict | None = None) -> None:
        assignment = {p: r for (t, p), r in self.ctx.assignments.items() if t == topic}
        await self.zk(zkl.write_topic_assignment, topic, assignment, self.ctx.epoch_zk_version,
                      adding, removing)

    async def reassign(self) -> None:
        """Start every valid reassignment in /admin/reassign_partitions; drop invalid ones."""
        ctx = self.ctx
        pending = await self.zk(zkl.read_reassignment)
        for tp, target in sorted(pending.items()):
            if tp in ctx.reassigning:
                continue
            if (tp not in ctx.assignments or not target or len(set(target)) != len(target)
                    or tp[0] in ctx.topics_being_deleted):
                log.warning("ignoring invalid reassignment of %s to %s", tp, target)
                continue
            if target == ctx.assignments[tp]:
                continue
            await self._start_reassignment(tp, target)
        still = {tp: r for tp, r in pending.items() if tp in ctx.reassigning}
        if still != pending:
            await self.zk(zkl.write_reassignment, still)

    async def _start_reassignment(self, tp: TopicPartition, target: list[int]) -> None:
        ctx = self.ctx
        original = ctx.assignments[tp]
        adding = [r for r in target if r not in original]
        removing = [r for r in original if r not in target]
        ctx.reassigning[tp] = list(target)
        ctx.assignments[tp] = list(target) + removing
        await self._write_assignment(tp[0], {tp[1]: adding}, {tp[1]: removing})
        ctx.replica_states.transition([(*tp, r) for r in adding], ReplicaState.NEW)
        self.event_log.write("reassign-start", ctx.epoch, topic=tp[0], partition=tp[1],
                             replicas=ctx.assignments[tp], target=list(target))
        await self.ops.bump_leader_epoch(tp, ctx.assignments[tp], adding)
        await self.continue_reassignment(tp)

    async def continue_reassignment(self, tp: TopicPartition) -> None:
        """Finish the reassignment of `tp` once every target replica is in the ISR."""
        ctx = self.ctx
        target = ctx.reassigning.get(tp)
        current = await self.ops.refresh(tp)
        if target is None or current is None or not set(target) <= set(current[0].isr):
            return
        state = current[0]
        removing = [r for r in ctx.assignments[tp] if r not in target]
        ctx.replica_states.transition([(*tp, r) for r in target], ReplicaState.ONLINE)
        ctx.assignments[tp] = list(target)
        if state.leader not in target or state.leader not in ctx.live_ids:
            await self.ops.elect([tp], Selector.REASSIGNED)
        else:
            await self.ops.bump_leader_epoch(tp, target)
        for replica in removing:
            key = (*tp, replica)
            ctx.replica_states.transition([key], ReplicaState.OFFLINE)
            self.batch.stop_replica([replica], tp, delete=False)
            await self.ops.remove_from_isr([tp], replica)
            for step in (ReplicaState.DELETION_STARTED, ReplicaState.DELETION_SUCCESSFUL,
                         ReplicaState.NON_EXISTENT):
                ctx.replica_states.transition([key], step)
            self.batch.stop_replica([replica], tp, delete=True)
        await self._write_assignment(tp[0])
        del ctx.reassigning[tp]
        pending = await self.zk(zkl.read_reassignment)
        pending.pop(tp, None)
        await self.zk(zkl.write_reassignment, pending)
        self.batch.update_metadata(ctx.live_brokers, [tp])
        self.event_log.write("reassign-complete", ctx.epoch, topic=tp[0], partition=tp[1],
                             replicas=list(target))

    # -- preferred replica elections -------------------------------------------------------

    async def preferred_election(self) -> None:
        tps = await self.zk(zkl.read_preferred_election)
        await self.ops.elect(sorted(tp for tp in tps if self._eligible(tp)), Selector.PREFERRED)

    async def auto_rebalance(self) -> None:
        """Kafka's checkAndTriggerAutoLeaderRebalance: for each live broker, if more than
        leader.imbalance.per.broker.percentage of the partitions it prefers are led by
        others, elect it back where it is alive and in the ISR."""
        ctx = self.ctx
        for broker_id in sorted(ctx.live_ids):
            preferred = [tp for tp, r in ctx.assignments.items()
                         if r and r[0] == broker_id and self._eligible(tp)]
            if not preferred:
                continue
            imbalanced = [tp for tp in preferred if ctx.leader_of(tp) != broker_id]
            ratio = 100 * len(imbalanced) / len(preferred)
            if ratio > self.config.leader_imbalance_per_broker_percentage:
                candidates = [tp for tp in imbalanced
                              if broker_id in ctx.leadership[tp][0].isr] if imbalanced else []
                await self.ops.elect(sorted(candidates), Selector.PREFERRED)

    # -- topic deletion --------------------------------------------------------------------

    async def delete_topics(self) -> None:
        ctx = self.ctx
        try:
            requested = await self.zk(lambda zk: zk.get_children(zkl.DELETE_TOPICS))
        except NoNodeError:
            return
        for topic in sorted(requested):
            if topic in ctx.topics:
                ctx.topics_being_deleted.add(topic)
                tps = ctx.partitions_of(topic)
                ctx.partition_states.transition(tps, PartitionState.OFFLINE)
                ctx.partition_states.transition(tps, PartitionState.NON_EXISTENT)
                for tp in tps:
                    self.batch.stop_replica(ctx.assignments[tp], tp, delete=True)
                await self.zk(_delete_topic_znodes, topic)
                ctx.remove_topic(topic)
                self.batch.update_metadata(ctx.live_brokers)
                self.event_log.write("delete-topic", ctx.epoch, topic=topic)
            await self.zk(_delete_quietly, f"{zkl.DELETE_TOPICS}/{topic}")


def _delete_topic_znodes(zk, topic: str) -> None:
    _delete_quietly(zk, f"{zkl.BROKER_TOPICS}/{topic}", recursive=True)
    _delete_quietly(zk, f"{zkl.CONFIG_TOPICS}/{topic}")


def _delete_quietly(zk, path: str, recursive: bool = False) -> None:
    try:
        zk.delete(path, recursive=recursive)
    except NoNodeError:
        pass
