"""InitProducerId for idempotent producers, with producer ids allocated in ZooKeeper blocks.

As Kafka's ZooKeeper-era brokers: `/latest_producer_id_block` holds the last block handed
out ({"version":1,"broker":id,"block_start":"s","block_end":"e"}); a broker claims the
next block of `BLOCK_SIZE` ids with a compare-and-set on the znode version, so two brokers
never hand out the same id. Transactions are not supported (a transactional id is refused).
"""

from __future__ import annotations

import asyncio
import json

from kafka.protocol.producer import InitProducerIdResponse

from broker.errors import BrokerError, ErrorCode

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
    try:
        if request.transactional_id is not None:
            raise BrokerError(
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, "transactions are not supported"
            )
        if context.producer_ids is None:
            raise BrokerError(ErrorCode.UNKNOWN_SERVER_ERROR, "no producer id allocator")
        producer_id = await context.producer_ids.allocate()
    except BrokerError as exc:
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=exc.code, producer_id=-1, producer_epoch=-1
        )
    return InitProducerIdResponse(
        throttle_time_ms=0, error_code=ErrorCode.NONE, producer_id=producer_id, producer_epoch=0
    )
