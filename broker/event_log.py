"""A node's event log: one JSON object per line, appended and flushed per line, so a kill
loses at most the line being written. The controller and the group coordinator both write
to it (`broker.controller.event_log`, `broker.group.coordinator`)."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import IO

__all__ = ["EventLog"]


class EventLog:
    """Lines of `{"time": epoch ms, **common, "event": ..., **fields}` in `path` (None: kept
    nowhere, the record is only returned)."""

    def __init__(self, path: Path | None, **common: object) -> None:
        self.path = path
        self.common = common
        self._file: IO[str] | None = None

    def write(self, event: str, **fields: object) -> dict:
        record = {"time": int(time.time() * 1000), **self.common, "event": event, **fields}
        if self.path is not None:
            if self._file is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._file = open(self.path, "a", encoding="utf-8")
            self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
            self._file.flush()
        return record

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
