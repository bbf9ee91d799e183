"""Collects LeaderAndIsr, UpdateMetadata and StopReplica requests during one event and sends
them through the ControllerChannel at its end (Kafka's ControllerBrokerRequestBatch).

Sending does not wait for the answers: the channel keeps per-broker order, and failures and
partition errors are logged when the responses arrive.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict

from broker.control_plane import (
    BrokerEndpoint,
    ControllerChannel,
    LeaderAndIsrRequest,
    PartitionStateInfo,
    StopReplicaRequest,
    UpdateMetadataRequest,
)
from broker.controller.context import ControllerContext, TopicPartition

__all__ = ["RequestBatch"]

log = logging.getLogger(__name__)


class RequestBatch:
    def __init__(self, controller_id: int, context: ControllerContext,
                 channel: ControllerChannel) -> None:
        self.controller_id = controller_id
        self.ctx = context
        self.channel = channel
        self._clear()

    def _clear(self) -> None:
        self._leader_and_isr: dict[int, dict[TopicPartition, bool]] = defaultdict(dict)
        self._metadata_brokers: set[int] = set()
        self._metadata_partitions: set[TopicPartition] = set()
        self._metadata_all = False
        self._stop: dict[tuple[int, bool], set[TopicPartition]] = defaultdict(set)

    def leader_and_isr(self, brokers, tp: TopicPartition, is_new: bool = False) -> None:
        """LeaderAndIsr with the partition's current state to each live broker of `brokers`;
        also queues an UpdateMetadata of the partition to every live broker."""
        for broker_id in brokers:
            if broker_id in self.ctx.live_brokers:
                previous = self._leader_and_isr[broker_id].get(tp, False)
                self._leader_and_isr[broker_id][tp] = previous or is_new
        self.update_metadata(self.ctx.live_brokers, [tp])

    def update_metadata(self, brokers, partitions=None) -> None:
        """UpdateMetadata to `brokers` with `partitions` (None: every partition)."""
        self._metadata_brokers.update(b for b in brokers if b in self.ctx.live_brokers)
        if partitions is None:
            self._metadata_all = True
        else:
            self._metadata_partitions.update(partitions)

    def stop_replica(self, brokers, tp: TopicPartition, delete: bool) -> None:
        for broker_id in brokers:
            if broker_id in self.ctx.live_brokers:
                self._stop[(broker_id, delete)].add(tp)

    def _state(self, tp: TopicPartition, is_new: bool = False) -> PartitionStateInfo | None:
        current = self.ctx.leadership.get(tp)
        if current is None:
            return None
        state, zk_version = current
        return PartitionStateInfo(tp[0], tp[1], state.controller_epoch, state.leader,
                                  state.leader_epoch, state.isr, zk_version,
                                  tuple(self.ctx.assignments.get(tp, ())), is_new)

    def _endpoint(self, broker_id: int) -> BrokerEndpoint:
        reg = self.ctx.live_brokers[broker_id]
        return BrokerEndpoint(broker_id, reg.host, reg.port, reg.rack)

    def send(self) -> None:
        ctx = self.ctx
        for broker_id, new_by_tp in self._leader_and_isr.items():
            states = tuple(s for tp, is_new in sorted(new_by_tp.items())
                           if (s := self._state(tp, is_new)) is not None)
            leaders = tuple(self._endpoint(b) for b in sorted({s.leader for s in states})
                            if b in ctx.live_brokers)
            if states:
                self._enqueue(broker_id, LeaderAndIsrRequest(
                    self.controller_id, ctx.epoch, ctx.broker_epochs.get(broker_id, -1),
                    states, leaders))
        if self._metadata_brokers:
            described = ctx.leadership if self._metadata_all else self._metadata_partitions
            states = tuple(s for tp in sorted(described) if (s := self._state(tp)) is not None)
            brokers = tuple(self._endpoint(b) for b in sorted(ctx.live_brokers))
            for broker_id in sorted(self._metadata_brokers):
                self._enqueue(broker_id, UpdateMetadataRequest(
                    self.controller_id, ctx.epoch, ctx.broker_epochs.get(broker_id, -1),
                    states, brokers))
        for (broker_id, delete), stopped in sorted(self._stop.items()):
            self._enqueue(broker_id, StopReplicaRequest(
                self.controller_id, ctx.epoch, ctx.broker_epochs.get(broker_id, -1), delete,
                tuple(sorted(stopped))))
        self._clear()

    def _enqueue(self, broker_id: int, request) -> None:
        future = self.channel.enqueue(broker_id, request)
        name = type(request).__name__
        future.add_done_callback(lambda f: _check_response(f, broker_id, name))


def _check_response(future: asyncio.Future, broker_id: int, name: str) -> None:
    if future.cancelled():
        return
    error = future.exception()
    if error is not None:
        log.info("%s to broker %d not delivered: %s", name, broker_id, error)
        return
    response = future.result()
    failed = {tp: code for tp, code in getattr(response, "partition_errors", {}).items() if code}
    if response.error_code or failed:
        log.warning("%s to broker %d answered error %d, partition errors %s", name, broker_id,
                    response.error_code, failed)
