"""InitProducerId for idempotent producers, with producer ids allocated in ZooKeeper blocks.

As Kafka's ZooKeeper-era brokers: `/latest_producer_id_block` holds the last block handed
out ({"version":1,"broker":id,"block_start":"s","block_end":"e"}); a broker claims the
next block of `BLOCK_SIZE` ids with a compare-and-set on the znode version, so two brokers
never hand out the same id. A transactional id is the transaction coordinator's
(`broker.txn`).
"""

from __future__ import annotations

import asyncio
import json

from kafka.protocol.producer import InitProducerIdResponse

from broker.errors import ErrorCode
from broker.server.txn import fenced_for

__all__ = ["BLOCK_SIZE", "ProducerIdAllocator", "handle"]

BLOCK_PATH = "/latest_producer_id_block"
BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, zk, broker_id: int) -> None:
        self.zk = zk
        self.broker_id = broker_id
        self._next = 0
        self._end = -1  # inclusive end of the current block
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self._next > self._end:
                start = await asyncio.get_running_loop().run_in_executor(None, self._claim_block)
                self._next, self._end = start, start + BLOCK_SIZE - 1
            producer_id = self._next
            self._next += 1
            return producer_id

    def _claim_block(self) -> int:
        from kazoo.exceptions import BadVersionError, NodeExistsError

        while True:
            if self.zk.exists(BLOCK_PATH) is None:
                try:
                    self.zk.create(BLOCK_PATH, self._body(0), makepath=True)
                    return 0
                except NodeExistsError:
                    continue
            data, stat = self.zk.get(BLOCK_PATH)
            start = int(json.loads(data)["block_end"]) + 1 if data else 0
            try:
                self.zk.set(BLOCK_PATH, self._body(start), version=stat.version)
                return start
            except BadVersionError:
                continue

    def _body(self, start: int) -> bytes:
        return json.dumps(
            {
                "version": 1,
                "broker": self.broker_id,
                "block_start": str(start),
                "block_end": str(start + BLOCK_SIZE - 1),
            }
        ).encode()


async def handle(context, request, version: int, header):
    """A transactional id goes to the transaction coordinator; an idempotent producer gets
    a fresh producer id at epoch 0."""
    if request.transactional_id is not None:
        expected = None
        if version >= 3 and (request.producer_id, request.producer_epoch) != (-1, -1):
            expected = (request.producer_id, request.producer_epoch)
        code, producer_id, epoch = await context.txn.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, expected)
        return InitProducerIdResponse(throttle_time_ms=0,
                                      error_code=fenced_for(code, version, 4),
                                      producer_id=producer_id, producer_epoch=epoch)
    producer_id = await context.producer_ids.allocate()
    return InitProducerIdResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0
    )
