"""Coordinator ownership: which partitions of an internal topic this broker coordinates.

A coordinator (groups on `__consumer_offsets`, transactions on `__transaction_state`)
serves the keys placed on the internal topic's partitions this broker leads. Gaining the
leadership of one at a leader epoch loads it from its log (COORDINATOR_LOAD_IN_PROGRESS
meanwhile); losing it unloads it (NOT_COORDINATOR). A load that finds the leadership gone
(the store answers None) or superseded by a newer epoch is dropped. `PartitionOwner` is
that bookkeeping, once; a coordinator subclasses it and says how a loaded partition is
installed and how one is unloaded, and names its event-log lines.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import Any, ClassVar, Protocol

from broker.errors import ErrorCode
from broker.event_log import EventLog

__all__ = ["PartitionOwner", "PartitionStore"]

log = logging.getLogger("broker.coordination")


class PartitionStore(Protocol):
    """An internal topic's partitions as a coordinator reads them."""

    async def load(self, index: int, epoch: int) -> Any:
        """What partition `index` holds; None if this broker stopped leading it at `epoch`."""


class PartitionOwner:
    """The internal partitions this broker coordinates (`owned`: partition -> epoch) or is
    loading (`loading`), following the leadership callbacks `on_leader` and `on_resign`.

    A subclass sets `store`, `events` and the class attributes below, and implements
    `partition_of`, `_install` (a loaded partition becomes served) and `_unload`.
    `reload_on_new_epoch`: whether a new leader epoch of a partition already owned loads
    it again (else the epoch is only recorded)."""

    loading_event: ClassVar[str]
    partition_field: ClassVar[str]
    epoch_field: ClassVar[str]
    reload_on_new_epoch: ClassVar[bool] = False

    store: PartitionStore
    events: EventLog

    def __init__(self) -> None:
        self.owned: dict[int, int] = {}  # internal partition -> leader epoch, loaded
        self.loading: dict[int, int] = {}  # internal partition -> leader epoch, loading
        self._tasks: set[asyncio.Task] = set()

    def partition_of(self, key: str) -> int:
        """The internal partition of `key`."""
        raise NotImplementedError

    def owner_error(self, key: str) -> int:
        """NONE if this broker coordinates `key` now."""
        partition = self.partition_of(key)
        if partition in self.loading:
            return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        if partition not in self.owned:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE

    def on_leader(self, partition: int, epoch: int) -> None:
        """This broker leads `partition` at `epoch`: load it (once per epoch)."""
        if self.owned.get(partition) == epoch or self.loading.get(partition) == epoch:
            return
        if partition in self.owned:
            if not self.reload_on_new_epoch:
                self.owned[partition] = epoch
                return
            self._unload(partition, self.owned.pop(partition))
        self.loading[partition] = epoch
        self.events.write(self.loading_event,
                          **{self.partition_field: partition, self.epoch_field: epoch})
        self._spawn(self._load(partition, epoch))

    def on_resign(self, partition: int) -> None:
        """This broker no longer leads `partition`: unload it, or drop its load."""
        owned = self.owned.pop(partition, None)
        loading = self.loading.pop(partition, None)
        if owned is not None or loading is not None:
            self._unload(partition, owned)

    async def _load(self, partition: int, epoch: int) -> None:
        started = time.monotonic()
        try:
            loaded = await self.store.load(partition, epoch)
        except Exception:
            log.exception("loading %s %d failed", self.partition_field, partition)
            loaded = None
        if self.loading.get(partition) != epoch:
            return
        del self.loading[partition]
        if loaded is None:
            self._load_dropped(partition, epoch)
            return
        self.owned[partition] = epoch
        self._install(partition, epoch, loaded, started)

    def _install(self, partition: int, epoch: int, loaded: Any, started: float) -> None:
        """Serve what `partition` held (`loaded`, read from `started`, a monotonic time)."""
        raise NotImplementedError

    def _unload(self, partition: int, epoch: int | None) -> None:
        """Stop serving `partition`, owned at `epoch` (None: it was still loading)."""
        raise NotImplementedError

    def _load_dropped(self, partition: int, epoch: int) -> None:
        """The load of `partition` at `epoch` found the leadership gone."""

    def _spawn(self, coroutine: Coroutine[Any, Any, object]) -> None:
        task = asyncio.get_running_loop().create_task(coroutine)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
