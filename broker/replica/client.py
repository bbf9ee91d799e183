"""A minimal Kafka-protocol client connection used by the follower fetcher.

One request at a time on one connection: frame, send, read the response frame,
check the correlation id and decode it with kafka-python's classes.
"""

from __future__ import annotations

import asyncio
import struct

__all__ = ["BrokerConnection"]

_SIZE = struct.Struct(">i")


class BrokerConnection:
    def __init__(self, host: str, port: int, client_id: str, timeout: float = 30.0) -> None:
        self.host = host
        self.port = port
        self.client_id = client_id
        self.timeout = timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation_id = 0

    async def connect(self) -> None:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port), self.timeout
        )

    @property
    def connected(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def send(self, request, response_type, version: int):
        """Send `request` at `version`; the decoded response (ConnectionError on failure)."""
        if not self.connected:
            await self.connect()
        assert self._reader is not None and self._writer is not None
        self._correlation_id = (self._correlation_id + 1) & 0x7FFFFFFF
        request.API_VERSION = version
        request.with_header(correlation_id=self._correlation_id, client_id=self.client_id)
        self._writer.write(bytes(request.encode(version=version, header=True, framed=True)))
        try:
            await asyncio.wait_for(self._writer.drain(), self.timeout)
            size = _SIZE.unpack(await asyncio.wait_for(self._reader.readexactly(4), self.timeout))[
                0
            ]
            frame = await asyncio.wait_for(self._reader.readexactly(size), self.timeout)
        except (asyncio.IncompleteReadError, TimeoutError) as exc:
            self.close()
            raise ConnectionError(f"no response from {self.host}:{self.port}: {exc!r}") from exc
        correlation_id = _SIZE.unpack_from(frame, 0)[0]
        if correlation_id != self._correlation_id:
            self.close()
            raise ConnectionError(f"correlation id {correlation_id} != {self._correlation_id}")
        pos = 4
        if response_type.flexible_version_q(version) and response_type.API_KEY != 18:
            pos += 1  # empty tagged fields of response header v1 (never for ApiVersions)
        return response_type.decode(memoryview(frame)[pos:], version=version)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._reader = self._writer = None
