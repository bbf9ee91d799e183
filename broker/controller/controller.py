"""The controller: one per broker, at most one active (seeds/000 "Controller", seeds/002
"kafka controller").

Election: every broker watches /controller; when it is free, a broker creates it (ephemeral)
and bumps /controller_epoch in the same ZooKeeper transaction, CAS on its version; that version
then fences every ZooKeeper write of this controller, and the epoch goes into every request.
Losing the session, or /controller naming someone else, resigns.

Everything happens in `process`, one event at a time on the broker's asyncio loop; kazoo
watchers and the session listener only enqueue events (`EventManager.put_threadsafe`).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from pathlib import Path

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import ConnectionClosedError, NoNodeError, SessionExpiredError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch
from kazoo.retry import RetryFailedError

from broker import zk as zkl
from broker.control_plane import NONE, BrokerEndpoint, ControllerChannel
from broker.controller.admin import AdminOps
from broker.controller.config import ControllerConfig
from broker.controller.context import ControllerContext, TopicPartition
from broker.controller.election import Selector
from broker.controller.event_log import EventLog
from broker.controller.event_manager import EventManager
from broker.controller.events import (
    AutoPreferredReplicaLeaderElection,
    BrokerChange,
    ControlledShutdown,
    ControllerEvent,
    Expire,
    IsrChangeNotification,
    PartitionModifications,
    PartitionReassignment,
    PreferredReplicaElection,
    Reelect,
    Startup,
    TopicChange,
    TopicDeletion,
)
from broker.controller.partitions import PartitionOps, ZkCall, bind_zk
from broker.controller.requests import RequestBatch
from broker.controller.state_machines import PartitionState, ReplicaState

__all__ = ["Controller"]

log = logging.getLogger(__name__)

BROKER_NOT_AVAILABLE = 8
STALE_BROKER_EPOCH = 77


@dataclass(frozen=True)
class Tenure:
    """What an active controller holds, from its failover to its resignation."""

    channel: ControllerChannel
    batch: RequestBatch
    ops: PartitionOps
    admin: AdminOps


class Controller:
    def __init__(self, broker_id: int, zk: KazooClient, config: ControllerConfig,
                 event_log_path: Path | None, loop: asyncio.AbstractEventLoop | None = None
                 ) -> None:
        self.broker_id = broker_id
        self.zk = zk
        self.config = config
        self.loop = loop
        self.event_log = EventLog(event_log_path, broker_id)
        self.events = EventManager(self.process, f"controller-{broker_id}")
        self.ctx = ControllerContext()
        self.epoch = 0
        self.active_controller_id: int | None = None
        self.tenure: Tenure | None = None
        self._zk_call: ZkCall | None = None
        self._generation = 0
        self._session_lost = False
        self._stopped = False
        self._rebalance_task: asyncio.Task | None = None

    @property
    def is_active(self) -> bool:
        return self.tenure is not None

    @property
    def _active(self) -> Tenure:
        """The tenure of an event handler that runs only while this controller is active."""
        if self.tenure is None:
            raise RuntimeError(f"controller {self.broker_id} is not the active controller")
        return self.tenure

    @property
    def _zk(self) -> ZkCall:
        if self._zk_call is None:
            raise RuntimeError(f"controller {self.broker_id} is not started")
        return self._zk_call

    @property
    def _loop(self) -> asyncio.AbstractEventLoop:
        if self.loop is None:
            raise RuntimeError(f"controller {self.broker_id} is not started")
        return self.loop

    # -- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        self.loop = self.loop or asyncio.get_running_loop()
        self._zk_call = bind_zk(self.zk, self.loop.run_in_executor)
        self.zk.add_listener(self._on_session_state)
        self.events.start()
        self.events.put(Startup())

    async def stop(self) -> None:
        self._stopped = True
        self.zk.remove_listener(self._on_session_state)
        was_active = self.is_active
        await self.events.close()
        await self._resign()
        if was_active and self.zk.connected:
            try:
                if await self._zk(zkl.read_controller) == self.broker_id:
                    await self._zk(_delete_if_exists, zkl.CONTROLLER)
            except Exception:
                log.exception("could not delete /controller")
        self.event_log.close()

    async def controlled_shutdown(self, broker_id: int,
                                  broker_epoch: int) -> tuple[int, list[tuple[str, int]]]:
        """Plugged into ControlPlaneServer: move leadership off `broker_id`; returns
        (error code, partitions it still leads)."""
        answer = asyncio.get_running_loop().create_future()
        self.events.put(ControlledShutdown(broker_id, broker_epoch, answer))
        return await answer

    def _on_session_state(self, state: str) -> None:
        """kazoo's thread: hand session changes to the event queue."""
        if self.loop is None or self.loop.is_closed():
            return
        if state == KazooState.LOST:
            self._session_lost = True
            self.loop.call_soon_threadsafe(self.events.clear_and_put, Expire())
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            self.events.put_threadsafe(Reelect())

    # -- the event loop --------------------------------------------------------------------

    async def process(self, event: ControllerEvent) -> None:
        try:
            match event:
                case Startup():
                    await self._zk(zkl.ensure_paths)
                    await self._watch(DataWatch, zkl.CONTROLLER, Reelect(), persistent=True)
                    await self._elect()
                case Reelect():
                    await self._reelect()
                case Expire():
                    await self._resign()
                case _ if not self.is_active:
                    event.preempt()
                case BrokerChange():
                    await self._on_broker_change()
                case TopicChange():
                    await self._on_topic_change()
                case PartitionModifications(topic):
                    await self._on_partition_modifications(topic)
                case TopicDeletion():
                    await self._active.admin.delete_topics()
                case IsrChangeNotification():
                    await self._on_isr_change()
                case PartitionReassignment():
                    await self._active.admin.reassign()
                case PreferredReplicaElection():
                    await self._active.admin.preferred_election()
                case AutoPreferredReplicaLeaderElection():
                    await self._active.admin.auto_rebalance()
                case ControlledShutdown(broker_id, broker_epoch, answer):
                    result = await self._on_controlled_shutdown(broker_id, broker_epoch)
                    self._active.batch.send()
                    if not answer.done():
                        answer.set_result(result)
            if self.tenure is not None:
                self.tenure.batch.send()
        except (ConnectionClosedError, SessionExpiredError, RetryFailedError) as exc:
            log.warning("controller %d: ZooKeeper unavailable while processing %s: %r",
                        self.broker_id, event.name, exc)
            event.preempt()
        except zkl.ControllerMovedError:
            log.warning("controller %d: epoch znode moved, another controller was elected",
                        self.broker_id)
            await self._resign()
            event.preempt()
            self.events.put(Reelect())

    async def _watch(self, kind, path: str, event: ControllerEvent,
                     persistent: bool = False) -> None:
        """A kazoo watch that enqueues `event`; it stops at the next resignation unless
        `persistent` (the /controller watch lives as long as the controller object)."""
        generation = self._generation

        def fire(*_args) -> bool | None:
            if self._stopped or (not persistent and generation != self._generation):
                return False
            self.events.put_threadsafe(event)
            return None

        await self._loop.run_in_executor(None, lambda: kind(self.zk, path, fire))

    # -- election and failover -------------------------------------------------------------

    async def _reelect(self) -> None:
        active = await self._zk(zkl.read_controller)
        self.active_controller_id = active
        if self.is_active and active != self.broker_id:
            await self._resign()
        if active is None:
            await self._elect()

    async def _elect(self) -> None:
        active = await self._zk(zkl.read_controller)
        if active == self.broker_id and not self.is_active:
            log.warning("/controller names broker %d, which is not acting: deleting it",
                        self.broker_id)
            await self._zk(_delete_if_exists, zkl.CONTROLLER)
            active = None
        if active is not None:
            self.active_controller_id = active
            return
        won = await self._zk(zkl.register_controller, self.broker_id)
        if won is None:
            self.active_controller_id = await self._zk(zkl.read_controller)
            return
        self.epoch, epoch_version = won
        self.active_controller_id = self.broker_id
        log.info("broker %d is the controller, epoch %d", self.broker_id, self.epoch)
        try:
            await self._on_failover(epoch_version)
        except zkl.ControllerMovedError:
            raise
        except Exception:
            log.exception("controller %d: failover failed; resigning so another broker can "
                          "take over", self.broker_id)
            await self._resign()
            await self._zk(_delete_if_exists, zkl.CONTROLLER)

    async def _on_failover(self, epoch_version: int) -> None:
        self._generation += 1
        ctx = self.ctx
        ctx.reset()
        ctx.epoch, ctx.epoch_zk_version = self.epoch, epoch_version
        channel = ControllerChannel(request_timeout=self.config.request_timeout_seconds)
        batch = RequestBatch(self.broker_id, ctx, channel)
        ops = PartitionOps(ctx, self._zk, batch, self.event_log,
                           self.config.unclean_leader_election_enable)
        admin = AdminOps(ctx, self._zk, batch, ops, self.event_log, self.config)
        self.tenure = Tenure(channel, batch, ops, admin)
        self.event_log.write("become-controller", self.epoch)
        for kind, path, event in (
                (ChildrenWatch, zkl.BROKER_IDS, BrokerChange()),
                (ChildrenWatch, zkl.BROKER_TOPICS, TopicChange()),
                (ChildrenWatch, zkl.DELETE_TOPICS, TopicDeletion()),
                (ChildrenWatch, zkl.ISR_CHANGE_NOTIFICATION, IsrChangeNotification()),
                (DataWatch, zkl.REASSIGN_PARTITIONS, PartitionReassignment()),
                (DataWatch, zkl.PREFERRED_REPLICA_ELECTION, PreferredReplicaElection())):
            await self._watch(kind, path, event)
        for reg, broker_epoch in (await self._zk(zkl.read_broker_epochs)).values():
            self._add_broker(reg, broker_epoch)
        for topic in await self._zk(zkl.read_topics):
            await self._load_topic(topic)
        await self._zk(zkl.read_isr_change_notifications)
        for tp in ctx.assignments:
            leadership = ctx.leadership.get(tp)
            if leadership is None:
                ctx.partition_states.set(tp, PartitionState.NEW)
            elif leadership[0].leader in ctx.live_ids:
                ctx.partition_states.set(tp, PartitionState.ONLINE)
            else:
                ctx.partition_states.set(tp, PartitionState.OFFLINE)
            for replica in ctx.assignments[tp]:
                ctx.replica_states.set((*tp, replica), ReplicaState.ONLINE
                                       if replica in ctx.live_ids else ReplicaState.OFFLINE)
        self._send_metadata_first(ctx.live_brokers)
        for tp in ctx.leadership:
            batch.leader_and_isr(ctx.assignments[tp], tp)
        await self._trigger_online()
        await admin.reassign()
        await admin.preferred_election()
        batch.send()
        if self.config.auto_leader_rebalance_enable:
            self._rebalance_task = self._loop.create_task(self._rebalance_timer())

    async def _resign(self) -> None:
        """Stop acting as controller (idempotent): watches lapse, timers and links close."""
        tenure, self.tenure = self.tenure, None
        self._generation += 1
        if self._rebalance_task is not None:
            self._rebalance_task.cancel()
            self._rebalance_task = None
        self.ctx.reset()
        if tenure is not None:
            self.event_log.write("resign", self.epoch)
            log.info("broker %d resigned as controller (epoch %d)", self.broker_id, self.epoch)
            await tenure.channel.close()

    async def _rebalance_timer(self) -> None:
        while True:
            await asyncio.sleep(self.config.leader_imbalance_check_interval_seconds)
            self.events.put(AutoPreferredReplicaLeaderElection())

    # -- context helpers -------------------------------------------------------------------

    def _add_broker(self, reg: zkl.BrokerRegistration, broker_epoch: int) -> None:
        self.ctx.live_brokers[reg.broker_id] = reg
        self.ctx.broker_epochs[reg.broker_id] = broker_epoch
        self._active.channel.add_broker(BrokerEndpoint(reg.broker_id, reg.control_host,
                                                       reg.control_port, reg.rack))

    def _remove_broker(self, broker_id: int) -> None:
        self.ctx.live_brokers.pop(broker_id, None)
        self.ctx.broker_epochs.pop(broker_id, None)
        self.ctx.shutting_down.discard(broker_id)
        self._active.channel.remove_broker(broker_id)

    async def _load_topic(self, topic: str) -> list[TopicPartition]:
        """Read a topic's assignment and partition states; watch it for added partitions."""
        assignment = await self._zk(zkl.read_topic_assignment, topic) or {}
        tps = await self._load_partitions(topic, assignment)
        await self._watch(DataWatch, f"{zkl.BROKER_TOPICS}/{topic}",
                          PartitionModifications(topic))
        return tps

    async def _load_partitions(self, topic: str,
                               assignment: dict[int, list[int]]) -> list[TopicPartition]:
        tps = []
        for partition, replicas in sorted(assignment.items()):
            tp = (topic, partition)
            self.ctx.assignments[tp] = replicas
            await self._active.ops.refresh(tp)
            tps.append(tp)
        return tps

    async def _create_partitions(self, tps: list[TopicPartition]) -> None:
        """Kafka's onNewPartitionCreation: New, then online with the first live replica."""
        ctx = self.ctx
        fresh = [tp for tp in tps if tp not in ctx.leadership]
        for tp in tps:
            if tp in ctx.leadership:
                ctx.partition_states.set(tp, PartitionState.ONLINE)
        ctx.partition_states.transition(fresh, PartitionState.NEW)
        ctx.replica_states.transition(
            [(*tp, r) for tp in fresh for r in ctx.assignments[tp]], ReplicaState.NEW)
        await self._active.ops.initialize(fresh)

    async def _trigger_online(self) -> None:
        """Kafka's triggerOnlinePartitionStateChange: New and Offline partitions go online."""
        ctx = self.ctx
        deleting = ctx.topics_being_deleted
        new = [tp for tp in ctx.partition_states.keys_in(PartitionState.NEW)
               if tp[0] not in deleting]
        offline = [tp for tp in ctx.partition_states.keys_in(PartitionState.OFFLINE)
                   if tp[0] not in deleting]
        await self._active.ops.initialize(sorted(new))
        await self._active.ops.elect(sorted(offline), Selector.OFFLINE)

    # -- event handlers --------------------------------------------------------------------

    async def _on_broker_change(self) -> None:
        ctx = self.ctx
        current = await self._zk(zkl.read_broker_epochs)
        known = dict(ctx.broker_epochs)
        new = set(current) - set(known)
        dead = set(known) - set(current)
        bounced = {b for b in set(current) & set(known) if current[b][1] != known[b]}
        if not (new or dead or bounced):
            return
        self.event_log.write("broker-change", ctx.epoch, new=sorted(new), dead=sorted(dead),
                             bounced=sorted(bounced))
        for broker_id in dead | bounced:
            self._remove_broker(broker_id)
        if dead | bounced:
            await self._on_broker_failure(dead | bounced)
        for broker_id in new | bounced:
            self._add_broker(*current[broker_id])
        if new | bounced:
            await self._on_broker_startup(new | bounced)
        self._active.batch.update_metadata(ctx.live_brokers)

    async def _on_broker_failure(self, dead: set[int]) -> None:
        """Kafka's onReplicasBecomeOffline: partitions they led go offline and are elected
        with the offline selector; then their replicas leave the ISR of every partition."""
        ctx = self.ctx
        led = [tp for tp in ctx.partitions_led_by(dead) if tp[0] not in ctx.topics_being_deleted]
        ctx.partition_states.transition(led, PartitionState.OFFLINE)
        await self._trigger_online()
        for broker_id in sorted(dead):
            tps = ctx.partitions_on({broker_id})
            ctx.replica_states.transition([(*tp, broker_id) for tp in tps],
                                          ReplicaState.OFFLINE)
            await self._active.ops.remove_from_isr(tps, broker_id)

    async def _on_broker_startup(self, started: set[int]) -> None:
        ctx = self.ctx
        self._send_metadata_first(started)
        for tp in ctx.partitions_on(started):
            replicas = [r for r in ctx.assignments[tp] if r in started]
            ctx.replica_states.transition([(*tp, r) for r in replicas], ReplicaState.ONLINE)
            if tp in ctx.leadership:
                self._active.batch.leader_and_isr(replicas, tp)
        await self._trigger_online()
        for tp, target in sorted(ctx.reassigning.items()):
            if started.intersection(target):
                await self._active.admin.continue_reassignment(tp)

    def _send_metadata_first(self, brokers) -> None:
        """Send `brokers` every partition's state now, ahead of the LeaderAndIsr the event
        queues next (Kafka's onBrokerStartup and onControllerFailover). A broker that has
        just started knows no topic: made a transaction coordinator before it learnt them,
        it would take a prepared transaction's partitions for deleted ones and complete the
        transaction without writing their markers, leaving it open there for ever."""
        batch = self._active.batch
        batch.update_metadata(brokers)
        batch.send()

    async def _on_topic_change(self) -> None:
        ctx = self.ctx
        topics = set(await self._zk(zkl.read_topics))
        for topic in ctx.topics - topics:
            ctx.remove_topic(topic)
        for topic in sorted(topics - ctx.topics):
            await self._create_partitions(await self._load_topic(topic))

    async def _on_partition_modifications(self, topic: str) -> None:
        """Partitions added to an existing topic (changes to existing ones are reassignments,
        which go through /admin/reassign_partitions)."""
        ctx = self.ctx
        if topic not in ctx.topics or topic in ctx.topics_being_deleted:
            return
        assignment = await self._zk(zkl.read_topic_assignment, topic) or {}
        added = {p: r for p, r in assignment.items() if (topic, p) not in ctx.assignments}
        if added:
            self.event_log.write("add-partitions", ctx.epoch, topic=topic,
                                 partitions=sorted(added))
            await self._create_partitions(await self._load_partitions(topic, added))

    async def _on_isr_change(self) -> None:
        ctx = self.ctx
        changed = sorted(tp for tp in await self._zk(zkl.read_isr_change_notifications)
                         if tp in ctx.assignments)
        for tp in changed:
            current = await self._active.ops.refresh(tp)
            if current is not None:
                state = current[0]
                self.event_log.election("isr-change", ctx.epoch, tp[0], tp[1], None,
                                        state.leader, state.leader, state.leader_epoch,
                                        state.isr)
        self._active.batch.update_metadata(ctx.live_brokers, changed)
        for tp in changed:
            if tp in ctx.reassigning:
                await self._active.admin.continue_reassignment(tp)

    async def _on_controlled_shutdown(self, broker_id: int,
                                      broker_epoch: int) -> tuple[int, list[tuple[str, int]]]:
        """Kafka's doControlledShutdown: leaders move with the controlled-shutdown selector,
        follower replicas go offline (StopReplica, out of the ISR)."""
        ctx = self.ctx
        if broker_id not in ctx.live_brokers:
            return BROKER_NOT_AVAILABLE, []
        if broker_epoch != ctx.broker_epochs[broker_id]:
            return STALE_BROKER_EPOCH, []
        ctx.shutting_down.add(broker_id)
        self.event_log.write("controlled-shutdown", ctx.epoch, broker_id=broker_id)
        replicated = [tp for tp in ctx.partitions_on({broker_id})
                      if len(ctx.assignments[tp]) > 1 and tp in ctx.leadership]
        led = [tp for tp in replicated if ctx.leader_of(tp) == broker_id]
        await self._active.ops.elect(led, Selector.CONTROLLED_SHUTDOWN)
        for tp in replicated:
            if ctx.leader_of(tp) != broker_id:
                ctx.replica_states.transition([(*tp, broker_id)], ReplicaState.OFFLINE)
                self._active.batch.stop_replica([broker_id], tp, delete=False)
                await self._active.ops.remove_from_isr([tp], broker_id)
        self._active.batch.update_metadata(ctx.live_brokers)
        remaining = [tp for tp in ctx.partitions_led_by({broker_id})
                     if len(ctx.assignments[tp]) > 1]
        return NONE, remaining


def _delete_if_exists(zk: KazooClient, path: str) -> None:
    try:
        zk.delete(path)
    except NoNodeError:
        pass
