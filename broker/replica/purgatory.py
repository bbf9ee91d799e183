"""Delayed operations: produce requests waiting for the high watermark, fetches waiting for data.

Both are per partition and event driven: a partition calls `DelayedProduce.complete_up_to`
only when its high watermark moves and `FetchWaiters.notify` only when its log or high
watermark changes, so nothing polls. Timeouts belong to the waiting request handler
(`asyncio.wait(..., timeout=...)`); abandoned futures are cancelled and skipped here.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections.abc import Callable, Iterable

__all__ = ["DelayedProduce", "FetchWaiters", "wait_any"]

_sequence = itertools.count()


class DelayedProduce:
    """acks=-1 appends of one partition waiting until the high watermark reaches an offset."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, asyncio.Future[int]]] = []

    def __len__(self) -> int:
        return len(self._heap)

    def add(self, required_offset: int) -> asyncio.Future[int]:
        """A future resolved with an error code once high watermark >= `required_offset`."""
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._heap, (required_offset, next(_sequence), future))
        return future

    def complete_up_to(self, high_watermark: int, outcome: Callable[[], int]) -> None:
        """Resolve every waiter whose offset is covered; `outcome()` gives the error code."""
        heap = self._heap
        code: int | None = None
        while heap and heap[0][0] <= high_watermark:
            _, _, future = heapq.heappop(heap)
            if not future.done():
                if code is None:
                    code = outcome()
                future.set_result(code)

    def fail_all(self, code: int) -> None:
        """Leadership moved or the partition was stopped: answer every waiter with `code`."""
        heap, self._heap = self._heap, []
        for _, _, future in heap:
            if not future.done():
                future.set_result(code)


class FetchWaiters:
    """Fetch requests parked on one partition until its log or high watermark changes."""

    __slots__ = ("_futures",)

    def __init__(self) -> None:
        self._futures: set[asyncio.Future[None]] = set()

    def watch(self, future: asyncio.Future[None]) -> None:
        self._futures.add(future)

    def unwatch(self, future: asyncio.Future[None]) -> None:
        self._futures.discard(future)

    def notify(self) -> None:
        if self._futures:
            futures, self._futures = self._futures, set()
            for future in futures:
                if not future.done():
                    future.set_result(None)


async def wait_any(waiters: Iterable[FetchWaiters], timeout: float) -> None:
    """Wait until any of `waiters` is notified or `timeout` seconds pass."""
    future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    waiters = list(waiters)
    for waiter in waiters:
        waiter.watch(future)
    try:
        await asyncio.wait_for(future, timeout)
    except TimeoutError:
        pass
    finally:
        for waiter in waiters:
            waiter.unwatch(future)
