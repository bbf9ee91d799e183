"""An asyncio TCP server that ends all its connections when it stops."""

from __future__ import annotations

import asyncio
from typing import Any

__all__ = ["TcpServer"]


class TcpServer:
    """Subclasses implement `_serve(reader, writer)` for one connection; the writer is closed
    after it returns, and `stop` cancels the connections still open."""

    def __init__(self, host: str, port: int, **options: Any) -> None:
        self.host = host
        self.port = port
        self._options = options
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, self.host, self.port,
                                                  **self._options)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    async def _connection(self, reader: asyncio.StreamReader,
                          writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None, "asyncio runs each connection callback in a task of its own"
        self._connections.add(task)
        try:
            await self._serve(reader, writer)
        finally:
            self._connections.discard(task)
            writer.close()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError
