"""The controller's lines in the node's event log (docs/broker.md):

    {"time": epoch ms, "controller_id", "controller_epoch", "event", "topic", "partition",
     "selector", "old_leader", "new_leader", "leader_epoch", "isr", "unclean"}

The checkers read it to attribute data loss to elections (unclean ones in particular).
"""

from __future__ import annotations

from pathlib import Path

from broker import event_log

__all__ = ["EventLog"]


class EventLog:
    """The node's event log, every line stamped with the controller's id and epoch."""

    def __init__(self, path: Path | None, controller_id: int) -> None:
        self._log = event_log.EventLog(path, controller_id=controller_id)
        self.controller_id = controller_id

    def write(self, event: str, controller_epoch: int, **fields: object) -> dict:
        return self._log.write(event, controller_epoch=controller_epoch, **fields)

    def close(self) -> None:
        self._log.close()

    def election(self, event: str, controller_epoch: int, topic: str, partition: int,
                 selector: str | None, old_leader: int, new_leader: int, leader_epoch: int,
                 isr: tuple[int, ...], unclean: bool = False) -> dict:
        return self.write(event, controller_epoch, topic=topic, partition=partition,
                          selector=selector, old_leader=old_leader, new_leader=new_leader,
                          leader_epoch=leader_epoch, isr=list(isr), unclean=unclean)
