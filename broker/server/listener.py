"""The client listener: asyncio TCP server with Kafka framing (int32 size prefix).

Connections are concurrent. Within one connection requests start in arrival order
(each becomes a task; a task runs its synchronous part, e.g. the log append, before
the next one starts) and responses are written strictly in request order, as Kafka
clients expect. A frame larger than `socket.request.max.bytes`, a negative size, an
unparseable header, an unknown API or version, or a body that does not fill its frame
exactly (`broker.server.wire`) closes the connection (after the responses already due
are written) and is never acted on; nothing crashes the broker.
"""

from __future__ import annotations

import asyncio
import logging
import struct
from collections.abc import Awaitable, Callable

from broker.server.tcp import TcpServer

__all__ = ["CLOSE", "ClientListener", "Handler"]

log = logging.getLogger("broker.server")

CLOSE = object()  # a handler result meaning "close this connection"
Handler = Callable[[memoryview], Awaitable[bytes | None | object]]
_SIZE = struct.Struct(">i")
MAX_IN_FLIGHT = 100


class ClientListener(TcpServer):
    """The client listener: requests of a connection are handled concurrently, answered in
    order."""

    def __init__(self, host: str, port: int, handler: Handler, max_request_bytes: int) -> None:
        super().__init__(host, port, reuse_address=True, limit=1 << 20)
        self.handler = handler
        self.max_request_bytes = max_request_bytes

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        responses: asyncio.Queue = asyncio.Queue(MAX_IN_FLIGHT)
        writing = asyncio.get_running_loop().create_task(self._write_responses(responses, writer))
        try:
            while not writing.done():
                size = _SIZE.unpack(await reader.readexactly(4))[0]
                if size <= 0 or size > self.max_request_bytes:
                    log.warning(
                        "closing %s: request size %d outside (0, %d]",
                        peer,
                        size,
                        self.max_request_bytes,
                    )
                    break
                frame = await reader.readexactly(size)
                await responses.put(asyncio.ensure_future(self.handler(memoryview(frame))))
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except asyncio.CancelledError:
            writing.cancel()
        finally:
            if not writing.done():
                try:
                    await asyncio.wait_for(_put_end(responses), 30)
                    await asyncio.wait_for(writing, 60)
                except (TimeoutError, asyncio.CancelledError):
                    writing.cancel()

    @staticmethod
    async def _write_responses(responses: asyncio.Queue, writer: asyncio.StreamWriter) -> None:
        while True:
            pending = await responses.get()
            if pending is None:
                return
            try:
                result = await pending
            except Exception:
                log.exception("request handler failed; closing the connection")
                result = CLOSE
            if result is CLOSE:
                writer.close()
                return
            if result is not None:
                writer.write(result)
                if writer.transport.get_write_buffer_size() > (1 << 20):
                    await writer.drain()


async def _put_end(responses: asyncio.Queue) -> None:
    await responses.put(None)
