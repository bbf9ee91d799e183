"""Side effects of partition and replica state changes: elections, ISR removal, leader-epoch
bumps. Every ZooKeeper write is a CAS on the state znode inside a transaction that checks the
version of /controller_epoch (zk.write_partition_state_fenced); a lost CAS re-reads the state
and retries. Each decision is queued on the RequestBatch and appended to the event log.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable, Iterable

from kazoo.retry import KazooRetry

from broker import zk as zkl
from broker.controller.context import ControllerContext, TopicPartition
from broker.controller.election import (
    ElectionResult,
    Selector,
    controlled_shutdown_election,
    noop_election,
    offline_election,
    preferred_election,
    reassigned_election,
)
from broker.controller.event_log import EventLog
from broker.controller.requests import RequestBatch
from broker.controller.state_machines import PartitionState, ReplicaState
from broker.zk import LeaderIsr

__all__ = ["PartitionOps", "ZkCall", "bind_zk"]

log = logging.getLogger(__name__)

ZkCall = Callable[..., Awaitable]
CAS_ATTEMPTS = 5
NO_LEADER = -1


class PartitionOps:
    def __init__(self, ctx: ControllerContext, zk_call: ZkCall, batch: RequestBatch,
                 event_log: EventLog, unclean_default: bool) -> None:
        self.ctx = ctx
        self.zk = zk_call
        self.batch = batch
        self.event_log = event_log
        self.unclean_default = unclean_default

    async def refresh(self, tp: TopicPartition) -> tuple[LeaderIsr, int] | None:
        """Read the state znode into the context."""
        current = await self.zk(zkl.read_partition_state, *tp)
        if current is not None:
            self.ctx.leadership[tp] = current
        return current

    async def _write(self, tp: TopicPartition, state: LeaderIsr,
                     version: int | None) -> int | None:
        new_version = await self.zk(zkl.write_partition_state_fenced, tp[0], tp[1], state,
                                    version, self.ctx.epoch_zk_version)
        if new_version is not None:
            self.ctx.leadership[tp] = (state, new_version)
        return new_version

    async def _unclean_allowed(self, topic: str) -> bool:
        config = await self.zk(zkl.read_topic_config, topic)
        value = config.get("unclean.leader.election.enable")
        return self.unclean_default if value is None else value.strip().lower() == "true"

    # -- NewPartition -> OnlinePartition ---------------------------------------------------

    async def initialize(self, tps: Iterable[TopicPartition]) -> list[TopicPartition]:
        """First live replica leads, the live replicas are the ISR (seeds/000 "PARTITION" 1)."""
        done = []
        for tp in self.ctx.partition_states.split(tps, PartitionState.ONLINE):
            replicas = self.ctx.assignments[tp]
            live = tuple(r for r in replicas if r in self.ctx.live_ids)
            if not live:
                log.warning("new partition %s has no live replica among %s", tp, replicas)
                continue
            state = LeaderIsr(live[0], 0, live, self.ctx.epoch)
            if await self._write(tp, state, None) is None:
                if await self.refresh(tp) is None:
                    continue
                state = self.ctx.leadership[tp][0]
            self.ctx.partition_states.set(tp, PartitionState.ONLINE)
            for replica in replicas:
                online = replica in self.ctx.live_ids
                self.ctx.replica_states.set(
                    (tp[0], tp[1], replica),
                    ReplicaState.ONLINE if online else ReplicaState.OFFLINE)
            self.batch.leader_and_isr(live, tp, is_new=True)
            self.event_log.election("new-partition", self.ctx.epoch, tp[0], tp[1], None,
                                    NO_LEADER, state.leader, state.leader_epoch, state.isr)
            done.append(tp)
        return done

    # -- OnlinePartition/OfflinePartition -> OnlinePartition -------------------------------

    async def _select(self, selector: str, tp: TopicPartition,
                      state: LeaderIsr) -> ElectionResult | None:
        ctx, assignment = self.ctx, self.ctx.assignments[tp]
        match selector:
            case Selector.OFFLINE:
                live_isr = [r for r in state.isr if r in ctx.live_ids]
                allow = bool(live_isr) or await self._unclean_allowed(tp[0])
                return offline_election(assignment, state.isr, ctx.live_ids, allow)
            case Selector.REASSIGNED:
                return reassigned_election(ctx.reassigning.get(tp, ()), state.isr, ctx.live_ids)
            case Selector.PREFERRED:
                return preferred_election(assignment, state.leader, state.isr, ctx.live_ids)
            case Selector.CONTROLLED_SHUTDOWN:
                return controlled_shutdown_election(assignment, state.isr,
                                                    ctx.live_or_shutting_down, ctx.shutting_down)
            case Selector.NOOP:
                return noop_election(assignment, state.leader, state.isr)
        raise ValueError(f"unknown selector {selector!r}")

    async def elect(self, tps: Iterable[TopicPartition], selector: str) -> list[TopicPartition]:
        """Move partitions to OnlinePartition with `selector`; returns those that got a leader.
        A partition the selector cannot serve keeps its state (an offline one stays offline)."""
        elected = []
        for tp in self.ctx.partition_states.split(tps, PartitionState.ONLINE):
            for _ in range(CAS_ATTEMPTS):
                current = await self.refresh(tp)
                if current is None:
                    break
                state, version = current
                result = await self._select(selector, tp, state)
                if result is None:
                    log.info("%s election for %s not possible (leader %d, isr %s, live %s)",
                             selector, tp, state.leader, state.isr, sorted(self.ctx.live_ids))
                    break
                if selector == Selector.NOOP:
                    new_state = state
                else:
                    new_state = LeaderIsr(result.leader, state.leader_epoch + 1, result.isr,
                                          self.ctx.epoch)
                    if await self._write(tp, new_state, version) is None:
                        continue
                self.ctx.partition_states.set(tp, PartitionState.ONLINE)
                self.batch.leader_and_isr(result.recipients, tp)
                self.event_log.election("elect-leader", self.ctx.epoch, tp[0], tp[1], selector,
                                        state.leader, new_state.leader, new_state.leader_epoch,
                                        new_state.isr, result.unclean)
                if result.unclean:
                    log.warning("unclean election of %d for %s: potential data loss",
                                result.leader, tp)
                elected.append(tp)
                break
        return elected

    # -- OnlineReplica -> OfflineReplica: leave the ISR ------------------------------------

    async def remove_from_isr(self, tps: Iterable[TopicPartition], replica: int) -> None:
        """Kafka's removeReplicasFromIsr: the replica leaves the ISR (unless it is the last
        member); if it still leads, the partition gets no leader (-1). Leader epoch + 1."""
        for tp in tps:
            for _ in range(CAS_ATTEMPTS):
                current = await self.refresh(tp)
                if current is None:
                    break
                state, version = current
                if replica not in state.isr and state.leader != replica:
                    break
                leader = NO_LEADER if state.leader == replica else state.leader
                isr = state.isr if state.isr == (replica,) else tuple(
                    r for r in state.isr if r != replica)
                new_state = LeaderIsr(leader, state.leader_epoch + 1, isr, self.ctx.epoch)
                if await self._write(tp, new_state, version) is None:
                    continue
                if leader == NO_LEADER:
                    self.ctx.partition_states.set(tp, PartitionState.OFFLINE)
                recipients = [r for r in self.ctx.assignments.get(tp, ()) if r != replica]
                self.batch.leader_and_isr(recipients, tp)
                event = "leader-offline" if leader == NO_LEADER else "remove-from-isr"
                self.event_log.election(event, self.ctx.epoch, tp[0], tp[1], None, state.leader,
                                        leader, new_state.leader_epoch, isr)
                break

    async def bump_leader_epoch(self, tp: TopicPartition, recipients: Iterable[int],
                                new_replicas: Iterable[int] = ()) -> bool:
        """Same leader and ISR, leader epoch + 1, LeaderAndIsr to `recipients` (reassignment)."""
        for _ in range(CAS_ATTEMPTS):
            current = await self.refresh(tp)
            if current is None:
                return False
            state, version = current
            new_state = LeaderIsr(state.leader, state.leader_epoch + 1, state.isr, self.ctx.epoch)
            if await self._write(tp, new_state, version) is not None:
                new = set(new_replicas)
                self.batch.leader_and_isr([r for r in recipients if r not in new], tp)
                self.batch.leader_and_isr([r for r in recipients if r in new], tp, is_new=True)
                self.event_log.election("bump-leader-epoch", self.ctx.epoch, tp[0], tp[1], None,
                                        state.leader, state.leader, new_state.leader_epoch,
                                        state.isr)
                return True
        return False


def bind_zk(zk, run_in_executor: Callable) -> ZkCall:
    """An async caller of the synchronous zk functions through the loop's executor; a lost
    connection is retried (up to 30 s) while the session lives, as Kafka's ZooKeeper client
    does; an expired session or a closed client raises."""
    retry = KazooRetry(max_tries=-1, delay=0.1, max_delay=2.0, deadline=30.0,
                       ignore_expire=False)

    async def call(fn, *args):
        return await run_in_executor(None, functools.partial(retry.copy(), fn, zk, *args))

    return call
