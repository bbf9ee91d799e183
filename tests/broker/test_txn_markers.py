"""The transaction marker writer against a metadata cache that changes while it writes."""

from __future__ import annotations

import asyncio
import socket
from dataclasses import dataclass

from broker.control_plane import BrokerEndpoint
from broker.txn.markers import MarkerWriter


@dataclass(frozen=True)
class Leadership:
    leader: int


class LeaderLeaving:
    """A metadata cache whose only broker, the partition's leader, leaves the live brokers
    right after the writer looked the partition up (an UpdateMetadata handled meanwhile)."""

    def __init__(self, port: int) -> None:
        self.topics = {"t": {}}
        self.brokers = {1: BrokerEndpoint(1, "127.0.0.1", port)}

    def partition(self, topic: str, index: int) -> Leadership:
        asyncio.get_running_loop().call_soon(self.brokers.pop, 1, None)
        return Leadership(1)


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_leader_leaving_the_metadata_while_its_markers_go_out_is_retried_not_fatal():
    """The markers of a prepared transaction are written until they are, or the coordinator
    says stop: a broker dropped from the metadata between grouping the partitions by leader
    and sending must not end the writer with an exception, which left the transaction
    prepared for ever (every InitProducerId of its id answered CONCURRENT_TRANSACTIONS, its
    partitions' transactions open)."""
    async def scenario() -> bool:
        writer = MarkerWriter(2, LeaderLeaving(closed_port()), request_timeout_s=1.0)
        rounds: list[int] = []

        def go_on() -> bool:
            rounds.append(len(rounds))
            return len(rounds) < 3

        try:
            return await writer.write(7, 0, True, 1, [("t", 0)], go_on)
        finally:
            await writer.close()

    assert asyncio.run(scenario()) is False
