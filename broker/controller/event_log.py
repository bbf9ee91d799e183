"""The controller event log: one JSON line per decision, flushed per line (DESIGN.md).

    {"time": epoch ms, "controller_id", "controller_epoch", "event", "topic", "partition",
     "selector", "old_leader", "new_leader", "leader_epoch", "isr", "unclean"}

The checkers read it to attribute data loss to elections (unclean ones in particular).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO

__all__ = ["EventLog"]


class EventLog:
    def __init__(self, path: Path | None, controller_id: int) -> None:
        self.path = path
        self.controller_id = controller_id
        self._file: IO[str] | None = None

    def write(self, event: str, controller_epoch: int, **fields: object) -> dict:
        record = {"time": int(time.time() * 1000), "controller_id": self.controller_id,
                  "controller_epoch": controller_epoch, "event": event, **fields}
        if self.path is not None:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()
        return record

    def election(self, event: str, controller_epoch: int, topic: str, partition: int,
                 selector: str | None, old_leader: int, new_leader: int, leader_epoch: int,
                 isr: tuple[int, ...], unclean: bool = False) -> dict:
        return self.write(event, controller_epoch, topic=topic, partition=partition,
                          selector=selector, old_leader=old_leader, new_leader=new_leader,
                          leader_epoch=leader_epoch, isr=list(isr), unclean=unclean)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
