"""The report's section about transactions: what the clients saw and what the coordinators
did.

From the history: the `txn` ops by outcome (committed, aborted on purpose, failed
otherwise, unknown). From the nodes' event logs (our broker's transaction coordinator):
how many state changes of each kind, and every event a reader wants to see one by one:
coordinator loads and unloads that held transactions (failovers, with the prepared
transactions a new coordinator finished), fences of older producer epochs, timeouts,
fencing skipped by the seeded defect.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checker.cluster.event_log import ControllerEvent
from checker.history import Op
from reports.html import Markup, element, join, table

__all__ = ["TransactionsView", "transactions_section", "transactions_view"]

ABORTED_ON_PURPOSE = "aborted on purpose"
NOTABLE = ("txn-coordinator-loaded", "txn-coordinator-unloaded", "txn-fenced", "txn-timed-out",
           "txn-fencing-skipped")
DETAIL_FIELDS = ("transactional_id", "producer_id", "producer_epoch", "fenced_epoch", "cause",
                 "txn_partition", "coordinator_epoch", "transactions", "prepared", "reason",
                 "request_epoch", "timeout_ms")
MAX_ROWS = 200


@dataclass(frozen=True)
class TransactionsView:
    outcomes: dict[str, int]
    changes: dict[tuple[str, str], int]
    notable: tuple[ControllerEvent, ...]

    def __bool__(self) -> bool:
        return bool(self.outcomes or self.changes or self.notable)


def transactions_view(ops: Sequence[Op], events: Sequence[ControllerEvent]) -> TransactionsView:
    outcomes: Counter[str] = Counter()
    for op in ops:
        if op.f != "txn" or op.type == "invoke":
            continue
        if op.type == "fail":
            purpose = op.extra.get("error") == ABORTED_ON_PURPOSE
            outcomes["aborted on purpose" if purpose else "failed (aborted)"] += 1
        else:
            outcomes[{"ok": "committed", "info": "unknown"}[op.type]] += 1
    txn_events = [e for e in events if e.event.startswith("txn-")]
    changes = Counter((str(e.details.get("state")), str(e.details.get("cause")))
                      for e in txn_events if e.event == "txn-state")
    notable = tuple(e for e in txn_events if e.event in NOTABLE and _holds_transactions(e))
    return TransactionsView(dict(outcomes), dict(changes), notable)


def _holds_transactions(event: ControllerEvent) -> bool:
    """A coordinator load or unload is worth a row only when it held transactions."""
    return not event.event.startswith("txn-coordinator-") or bool(
        event.details.get("transactions"))


def transactions_section(view: TransactionsView, start_wall_ms: float | None) -> Markup:
    if not view:
        return join([])
    parts: list[Any] = [element("h3", "Transactions", id="transactions")]
    if view.outcomes:
        parts.append(table(["txn ops", "count"], sorted(view.outcomes.items())))
    if view.changes:
        rows = [[state, cause, n] for (state, cause), n in sorted(view.changes.items())]
        parts.append(table(["state reached", "cause", "times"], rows))
    if view.notable:
        rows = [[_since(e.time, start_wall_ms), e.node or "", e.event,
                 join((f"{k}={e.details[k]}" for k in DETAIL_FIELDS if k in e.details), ", ")]
                for e in view.notable[:MAX_ROWS]]
        parts.append(table(["at (s)", "node", "event", "details"], rows))
        if len(view.notable) > MAX_ROWS:
            parts.append(element("p", f"... and {len(view.notable) - MAX_ROWS} more",
                                 class_="muted"))
    return join(parts)


def _since(time_ms: int, start_wall_ms: float | None) -> str:
    return f"{(time_ms - start_wall_ms) / 1000:.3f}" if start_wall_ms is not None else str(time_ms)
