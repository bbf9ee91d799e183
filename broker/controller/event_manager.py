"""One asyncio task drains one queue of controller events, in order (Kafka's
ControllerEventManager; seeds/000 "ControllerContext": 单线程基于事件队列的模型).

An exception while processing an event is logged and the loop goes on. `clear_and_put` drops
every pending event (each is preempted) before enqueuing one, as on session expiry.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

from broker.controller.events import ControllerEvent

__all__ = ["EventManager"]

log = logging.getLogger(__name__)


class EventManager:
    def __init__(self, process: Callable[[ControllerEvent], Awaitable[None]],
                 name: str = "controller") -> None:
        self._process = process
        self.name = name
        self._queue: asyncio.Queue[tuple[ControllerEvent, float]] = asyncio.Queue()
        self._task: asyncio.Task | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self.current: ControllerEvent | None = None

    def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._task = self._loop.create_task(self._run(), name=f"{self.name}-events")

    def put(self, event: ControllerEvent) -> None:
        """Enqueue from the event loop's thread."""
        self._queue.put_nowait((event, time.monotonic()))

    def put_threadsafe(self, event: ControllerEvent) -> None:
        """Enqueue from another thread (kazoo watchers and listeners)."""
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self.put, event)

    def clear_and_put(self, event: ControllerEvent) -> None:
        self._drain()
        self.put(event)

    def _drain(self) -> None:
        while not self._queue.empty():
            dropped, _ = self._queue.get_nowait()
            self._queue.task_done()
            dropped.preempt()

    async def idle(self) -> None:
        """Wait until every event enqueued so far has been processed."""
        await self._queue.join()

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._drain()

    async def _run(self) -> None:
        while True:
            event, queued_at = await self._queue.get()
            self.current = event
            started = time.monotonic()
            try:
                await self._process(event)
            except asyncio.CancelledError:
                event.preempt()
                raise
            except Exception:
                log.exception("%s: error processing %s", self.name, event.name)
                event.preempt()
            finally:
                self.current = None
                self._queue.task_done()
            log.debug("%s: %s queued %.1f ms, processed in %.1f ms", self.name, event.name,
                      (started - queued_at) * 1000, (time.monotonic() - started) * 1000)
