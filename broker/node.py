"""BrokerNode: one broker process wired together.

Start: ZooKeeper session (a live registration under the same broker.id refuses to start),
base znodes and cluster id, log dirs recovered (LogManager.load), ReplicaManager, client and
control-plane listeners bound, registration in /brokers/ids, then the Controller (which
competes for /controller). SIGTERM (or SIGINT): controlled shutdown (the active controller
moves leadership away, retried until it reports no partition left or the time is up), then
everything is closed in reverse order and the process exits 0. SIGKILL at any instant is
safe: storage recovers from its recovery point on the next start.
"""

from __future__ import annotations

import asyncio
import json
import logging
import signal
import uuid
from pathlib import Path

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError

from broker import zk as zkpaths
from broker.config import BrokerConfig
from broker.control_plane import ControlPlaneServer, request_controlled_shutdown
from broker.controller.config import ControllerConfig
from broker.controller.controller import Controller
from broker.event_log import EventLog
from broker.group import GroupConfig, GroupCoordinator, OffsetsLog
from broker.group.placement import OFFSETS_TOPIC
from broker.internal_topic import InternalTopic
from broker.replica.manager import ReplicaManager, ReplicaSettings
from broker.server.dispatch import BrokerContext, Dispatcher
from broker.server.listener import ClientListener
from broker.server.producer_ids import ProducerIdAllocator
from broker.server.topics import TopicCreator
from broker.storage import LogConfig, LogManager
from broker.txn import MarkerWriter, TransactionCoordinator, TxnConfig, TxnLog
from broker.txn.placement import TRANSACTION_TOPIC

__all__ = ["BrokerNode", "StartupError"]

log = logging.getLogger("broker.node")

CLUSTER_ID_PATH = "/cluster/id"
CONTROLLED_SHUTDOWN_SECONDS = 30.0
TXN_LOG_APPEND_TIMEOUT_MS = 5000


class StartupError(Exception):
    """The broker cannot start (duplicate broker.id, ZooKeeper unreachable, ...)."""


class BrokerNode:
    def __init__(self, config: BrokerConfig) -> None:
        self.config = config
        self.broker_id = config.broker_id
        self.broker_epoch = -1
        self.zk: KazooClient | None = None
        self.logs: LogManager | None = None
        self.replicas: ReplicaManager | None = None
        self.listener: ClientListener | None = None
        self.control: ControlPlaneServer | None = None
        self.controller: Controller | None = None
        self.events: EventLog | None = None
        self.txn: TransactionCoordinator | None = None
        self._stop = asyncio.Event()
        self._session_lost = False

    @property
    def event_log_path(self) -> Path:
        if self.config.controller_event_log:
            return Path(self.config.controller_event_log)
        return self.config.data_dirs[0] / "controller-events.jsonl"

    async def run(self) -> int:
        """Start, serve until SIGTERM/SIGINT, shut down; returns the exit code."""
        loop = asyncio.get_running_loop()
        try:
            await self.start()
        except StartupError as exc:
            log.error("%s", exc)
            await self.close()
            raise
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self._stop.set)
        log.info(
            "broker %d started (client %s, control %s, epoch %d)",
            self.broker_id,
            self.config.client_listener,
            self.config.control_listener,
            self.broker_epoch,
        )
        await self._stop.wait()
        log.info("broker %d shutting down", self.broker_id)
        if self.config.controlled_shutdown_enable:
            await self.controlled_shutdown()
        await self.close()
        log.info("broker %d stopped", self.broker_id)
        return 0

    async def start(self) -> None:
        """Join the cluster, step by step as the module docstring lists."""
        zk = await self._connect_zookeeper()
        await self._check_broker_id_free(zk)
        cluster_id = await self._ensure_cluster_znodes(zk)
        logs = await self._recover_logs()
        replicas, context = self._start_replication(zk, logs, cluster_id)
        controller = self.controller = self._make_controller(zk)
        listener, control = await self._start_listeners(context, replicas, controller)
        await self._register(zk, listener.port, control.port)
        await controller.start()

    async def _connect_zookeeper(self) -> KazooClient:
        config = self.config
        zk = self.zk = KazooClient(
            hosts=config.zookeeper_connect, timeout=config.zookeeper_session_timeout_ms / 1000.0
        )
        connect_timeout = (
            config.zookeeper_connection_timeout_ms or config.zookeeper_session_timeout_ms
        ) / 1000.0
        try:
            await asyncio.get_running_loop().run_in_executor(
                None, lambda: zk.start(timeout=connect_timeout)
            )
        except Exception as exc:
            raise StartupError(
                f"cannot connect to ZooKeeper at {config.zookeeper_connect}: {exc!r}"
            ) from exc
        return zk

    async def _check_broker_id_free(self, zk: KazooClient) -> None:
        """Refuse a broker.id held by a live broker. A registration left by this broker's
        previous (killed) incarnation disappears within the session timeout, so wait that
        long before concluding that another broker holds the id."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.zookeeper_session_timeout_ms / 1000.0 + 1.0
        while True:
            existing = await loop.run_in_executor(None, zkpaths.read_brokers, zk)
            other = existing.get(self.broker_id)
            if other is None:
                return
            if loop.time() > deadline:
                raise StartupError(
                    f"broker.id {self.broker_id} is already registered by a live broker at "
                    f"{other.host}:{other.port} (/brokers/ids/{self.broker_id}); "
                    "refusing to start")
            await asyncio.sleep(0.25)

    async def _ensure_cluster_znodes(self, zk: KazooClient) -> str:
        """Create the persistent paths Kafka expects; the cluster id (created if absent)."""
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(None, zkpaths.ensure_paths, zk)
        return await loop.run_in_executor(None, _cluster_id, zk)

    async def _recover_logs(self) -> LogManager:
        config = self.config
        logs = LogManager(
            config.data_dirs,
            LogConfig(
                segment_bytes=config.log_segment_bytes,
                index_interval_bytes=config.log_index_interval_bytes,
                retention_bytes=config.log_retention_bytes,
                retention_ms=config.retention_ms,
                flush_messages=config.log_flush_interval_messages,
                flush_ms=config.flush_ms,
            ),
            lose_unflushed_on_crash=config.debug_lose_unflushed_on_crash,
        )
        try:
            await asyncio.get_running_loop().run_in_executor(None, logs.load)
        except Exception as exc:
            raise StartupError(f"cannot load the logs in {config.data_dirs}: {exc}") from exc
        self.logs = logs
        return logs

    def _start_replication(self, zk: KazooClient, logs: LogManager,
                           cluster_id: str) -> tuple[ReplicaManager, BrokerContext]:
        """Start the ReplicaManager; it and the context the client APIs are served with."""
        config = self.config
        replicas = self.replicas = ReplicaManager(
            ReplicaSettings(
                broker_id=self.broker_id,
                min_insync_replicas=config.min_insync_replicas,
                replica_lag_time_max_ms=config.replica_lag_time_max_ms,
                replica_fetch_wait_max_ms=config.replica_fetch_wait_max_ms,
                replica_fetch_max_bytes=config.replica_fetch_max_bytes,
                truncation_mode=config.replication_truncation_mode,
                hw_checkpoint_interval_ms=config.hw_checkpoint_interval_ms,
                log_flush_scheduler_interval_ms=config.log_flush_scheduler_interval_ms,
                retention_check_interval_ms=config.log_retention_check_interval_ms,
                log_flush_offset_checkpoint_interval_ms=(
                    config.log_flush_offset_checkpoint_interval_ms),
                log_cleaner_enable=config.log_cleaner_enable,
                log_cleaner_backoff_ms=config.log_cleaner_backoff_ms,
                log_cleaner_delete_retention_ms=config.log_cleaner_delete_retention_ms,
                log_cleaner_min_cleanable_ratio=config.log_cleaner_min_cleanable_ratio,
                debug_skip_epoch_fencing=config.debug_skip_epoch_fencing,
                debug_read_uncommitted_leak=config.debug_read_uncommitted_leak,
            ),
            logs,
            zk,
        )
        creator = TopicCreator(zk, replicas.metadata)
        replicas.on_metadata_update.append(creator.metadata_changed)
        events = self.events = EventLog(self.event_log_path, broker_id=self.broker_id)
        replicas.events = events
        for (topic, partition), tail in logs.lost_tails:
            events.write("unflushed-lost", topic=topic, partition=partition,
                              cause="kchaos.debug.lose-unflushed-on-crash", **tail.to_json())
        offsets_topic = InternalTopic(
            OFFSETS_TOPIC, replicas.metadata, creator,
            config.offsets_topic_num_partitions, config.offsets_topic_replication_factor,
            {"segment.bytes": str(config.offsets_topic_segment_bytes)})
        txn_topic = InternalTopic(
            TRANSACTION_TOPIC, replicas.metadata, creator,
            config.transaction_state_log_num_partitions,
            config.transaction_state_log_replication_factor,
            {"segment.bytes": str(config.transaction_state_log_segment_bytes),
             "min.insync.replicas": str(config.transaction_state_log_min_isr)})
        groups = self._make_group_coordinator(replicas, events, offsets_topic)
        producer_ids = ProducerIdAllocator(zk, self.broker_id)
        txn = self.txn = self._make_transaction_coordinator(replicas, events, txn_topic,
                                                            offsets_topic, producer_ids)
        context = BrokerContext(
            broker_id=self.broker_id,
            replicas=replicas,
            topic_creator=creator,
            producer_ids=producer_ids,
            groups=groups,
            offsets_topic=offsets_topic,
            txn=txn,
            txn_topic=txn_topic,
            auto_create_topics=config.auto_create_topics_enable,
            num_partitions=config.num_partitions,
            default_replication_factor=config.default_replication_factor,
            cluster_id=cluster_id,
        )
        replicas.start()
        txn.start()
        return replicas, context

    def _make_group_coordinator(self, replicas: ReplicaManager, events: EventLog,
                                offsets_topic: InternalTopic) -> GroupCoordinator:
        """The group coordinator, told by the ReplicaManager which offsets partitions this
        broker leads."""
        config = self.config
        coordinator = GroupCoordinator(
            self.broker_id,
            OffsetsLog(
                replicas,
                config.offsets_commit_timeout_ms,
                config.offsets_load_buffer_size,
                ack_before_replication=config.debug_ack_commit_before_replication,
            ),
            offsets_topic.partition_count,
            GroupConfig(
                min_session_timeout_ms=config.group_min_session_timeout_ms,
                max_session_timeout_ms=config.group_max_session_timeout_ms,
                initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
                max_group_size=config.group_max_size,
                max_metadata_bytes=config.offset_metadata_max_bytes,
            ),
            events,
        )
        _follow_leadership(replicas, OFFSETS_TOPIC, coordinator)
        return coordinator

    def _make_transaction_coordinator(self, replicas: ReplicaManager, events: EventLog,
                                      txn_topic: InternalTopic,
                                      offsets_topic: InternalTopic,
                                      producer_ids: ProducerIdAllocator) -> TransactionCoordinator:
        """The transaction coordinator, told which transaction log partitions this broker
        leads."""
        config = self.config
        coordinator = TransactionCoordinator(
            self.broker_id,
            TxnLog(replicas, TXN_LOG_APPEND_TIMEOUT_MS,
                   config.transaction_state_log_load_buffer_size),
            MarkerWriter(self.broker_id, replicas.metadata),
            txn_topic.partition_of,
            offsets_topic.partition_of,
            producer_ids.allocate,
            TxnConfig(
                max_timeout_ms=config.transaction_max_timeout_ms,
                abort_check_interval_ms=(
                    config.transaction_abort_timed_out_transaction_cleanup_interval_ms),
                skip_epoch_fencing=config.debug_skip_epoch_fencing,
            ),
            events,
        )
        _follow_leadership(replicas, TRANSACTION_TOPIC, coordinator)
        return coordinator

    def _make_controller(self, zk: KazooClient) -> Controller:
        config = self.config
        return Controller(
            self.broker_id,
            zk,
            ControllerConfig(
                default_replication_factor=config.default_replication_factor,
                num_partitions=config.num_partitions,
                min_insync_replicas=config.min_insync_replicas,
                unclean_leader_election_enable=config.unclean_leader_election_enable,
                auto_leader_rebalance_enable=config.auto_leader_rebalance_enable,
                leader_imbalance_check_interval_seconds=float(
                    config.leader_imbalance_check_interval_seconds
                ),
            ),
            self.event_log_path,
            asyncio.get_running_loop(),
        )

    async def _start_listeners(self, context: BrokerContext, replicas: ReplicaManager,
                               controller: Controller
                               ) -> tuple[ClientListener, ControlPlaneServer]:
        """Bind the client listener and the control-plane listener."""
        config = self.config
        client, control = config.client_listener, config.control_listener
        listener = self.listener = ClientListener(
            client.host, client.port, Dispatcher(context), config.socket_request_max_bytes
        )
        server = self.control = ControlPlaneServer(
            control.host, control.port, replicas, controller.controlled_shutdown
        )
        try:
            await listener.start()
            await server.start()
        except OSError as exc:
            raise StartupError(f"cannot bind listeners {client} / {control}: {exc}") from exc
        return listener, server

    async def _register(self, zk: KazooClient, client_port: int, control_port: int) -> None:
        """Register in /brokers/ids (the broker epoch); again after each session expiry."""
        loop = asyncio.get_running_loop()
        config = self.config
        advertised_client = config.advertised(config.client_listener)
        advertised_control = config.advertised(config.control_listener)
        registration = zkpaths.BrokerRegistration(
            self.broker_id,
            advertised_client.host or "127.0.0.1",
            client_port,
            advertised_control.host or "127.0.0.1",
            control_port,
            config.broker_rack,
        )
        try:
            self.broker_epoch = await loop.run_in_executor(
                None, zkpaths.register_broker, zk, registration
            )
        except zkpaths.BrokerIdInUseError as exc:
            raise StartupError(f"{exc}; refusing to start") from exc
        zk.add_listener(
            lambda state: loop.call_soon_threadsafe(self._zk_state, zk, registration, state))

    def _zk_state(self, zk: KazooClient, registration: zkpaths.BrokerRegistration,
                  state: str) -> None:
        """Kazoo thread -> loop: after an expired session, register again on reconnect."""
        if state == KazooState.LOST:
            log.warning("ZooKeeper session lost")
            self._session_lost = True
        elif state == KazooState.CONNECTED and self._session_lost and not self._stop.is_set():
            self._session_lost = False
            asyncio.get_running_loop().create_task(self._reregister(zk, registration))

    async def _reregister(self, zk: KazooClient,
                          registration: zkpaths.BrokerRegistration) -> None:
        loop = asyncio.get_running_loop()
        for _ in range(20):
            try:
                self.broker_epoch = await loop.run_in_executor(
                    None, zkpaths.register_broker, zk, registration
                )
                log.info("registered again with broker epoch %d", self.broker_epoch)
                return
            except zkpaths.BrokerIdInUseError:
                await asyncio.sleep(0.5)  # the old ephemeral node is not gone yet
            except Exception:
                log.exception("re-registration failed")
                await asyncio.sleep(1.0)

    async def controlled_shutdown(self) -> bool:
        """Ask the active controller to move leadership off this broker; True when it did."""
        zk, replicas = self.zk, self.replicas
        if zk is None or replicas is None:
            raise RuntimeError(f"broker {self.broker_id} is not started")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CONTROLLED_SHUTDOWN_SECONDS
        while loop.time() < deadline:
            try:
                controller_id = await loop.run_in_executor(None, zkpaths.read_controller, zk)
                brokers = await loop.run_in_executor(None, zkpaths.read_brokers, zk)
                target = brokers.get(controller_id) if controller_id is not None else None
                if target is not None:
                    code, remaining = await request_controlled_shutdown(
                        target.control_host,
                        target.control_port,
                        self.broker_id,
                        self.broker_epoch,
                        timeout=max(deadline - loop.time(), 1.0),
                    )
                    led = [
                        p.key
                        for p in replicas.partitions.values()
                        if p.is_leader and len(p.replicas) > 1
                    ]
                    log.info(
                        "controlled shutdown via controller %d: error %d, remaining %s, "
                        "still leading %s",
                        controller_id,
                        code,
                        remaining,
                        led,
                    )
                    if code == 0 and not remaining:
                        return True
            except (OSError, TimeoutError, ConnectionError) as exc:
                log.info("controlled shutdown attempt failed: %r", exc)
            await asyncio.sleep(0.5)
        log.warning(
            "controlled shutdown did not complete in %.0f s; stopping anyway",
            CONTROLLED_SHUTDOWN_SECONDS,
        )
        return False

    async def close(self) -> None:
        if self.controller is not None:
            await _quietly(self.controller.stop())
        if self.txn is not None:
            await _quietly(self.txn.stop())
        if self.listener is not None:
            await _quietly(self.listener.stop())
        if self.control is not None:
            await _quietly(self.control.stop())
        if self.replicas is not None:
            await _quietly(self.replicas.stop())
        if self.logs is not None:
            self.logs.close()
        if self.events is not None:
            self.events.close()
        if self.zk is not None:
            zk = self.zk
            await asyncio.get_running_loop().run_in_executor(None, _stop_zk, zk)
            self.zk = None


def _cluster_id(zk: KazooClient) -> str:
    try:
        zk.create(
            CLUSTER_ID_PATH,
            json.dumps({"version": "1", "id": uuid.uuid4().hex[:22]}).encode(),
            makepath=True,
        )
    except NodeExistsError:
        pass
    data, _ = zk.get(CLUSTER_ID_PATH)
    return json.loads(data)["id"]


def _follow_leadership(replicas: ReplicaManager, topic: str,
                       coordinator: GroupCoordinator | TransactionCoordinator) -> None:
    """`coordinator.on_leader` / `on_resign` as this broker gains and loses the leadership
    of `topic`'s partitions."""

    def leadership(key: tuple[str, int], leader_epoch: int | None) -> None:
        if key[0] != topic:
            return
        if leader_epoch is None:
            coordinator.on_resign(key[1])
        else:
            coordinator.on_leader(key[1], leader_epoch)

    replicas.on_leadership.append(leadership)


def _stop_zk(zk: KazooClient) -> None:
    try:
        zk.stop()
        zk.close()
    except Exception:
        log.exception("closing the ZooKeeper session failed")


async def _quietly(awaitable) -> None:
    try:
        await awaitable
    except Exception:
        log.exception("error during shutdown")
