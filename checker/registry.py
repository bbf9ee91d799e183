"""The checkers a test can compose by name (`kchaos run --checker a,b,...`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from checker.cluster.availability import AvailabilityChecker
from checker.cluster.elections import ElectionChecker
from checker.core import Checker, Composed, compose
from checker.groups.checker import GroupsChecker
from checker.lin.checker import LinearizabilityChecker
from checker.queue.acks import AcksChecker
from checker.queue.analysis import QueueChecker
from checker.stats import StatsChecker
from checker.transfer import TransferChecker
from checker.txn.checker import TxnChecker

__all__ = ["CHECKERS", "NEED_NODE_LOGS", "checker_names", "composed"]

CHECKERS: dict[str, Callable[[], Checker]] = {
    "queue": QueueChecker,
    "acks": AcksChecker,
    "elections": ElectionChecker,
    "linearizability": LinearizabilityChecker,
    "availability": AvailabilityChecker,
    "txn": TxnChecker,
    "groups": GroupsChecker,
    "transfer": TransferChecker,
    "stats": StatsChecker,
}
# Checkers that read the nodes' logs of a run folder (a bare history has none).
NEED_NODE_LOGS = frozenset({"elections"})


def checker_names(text: str | Iterable[str]) -> tuple[str, ...]:
    """Checker names from `a,b,...` or a list, order kept; ValueError naming unknown ones."""
    items = text.split(",") if isinstance(text, str) else list(text)
    names = tuple(dict.fromkeys(item.strip() for item in items if item.strip()))
    unknown = [name for name in names if name not in CHECKERS]
    if unknown or not names:
        raise ValueError(f"unknown checker {', '.join(unknown) or '(none given)'}; "
                         f"known: {', '.join(CHECKERS)}")
    return names


def composed(names: Iterable[str]) -> Composed:
    """One checker running the named ones and merging their verdicts."""
    return compose({name: CHECKERS[name]() for name in checker_names(names)})
