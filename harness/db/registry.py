"""The systems under test `kchaos run --db` knows: one line per db."""

from __future__ import annotations

from harness.db import kchaos
from harness.db.kafka import db as kafka
from harness.db.part import DBKind

__all__ = ["DBS"]

DBS: dict[str, DBKind] = {
    "kchaos": kchaos.KIND,
    "kafka": kafka.KIND,
}
