"""The checkers a test can compose by name (`kchaos run --checker a,b,...`), and the
anomaly types each declares it can report (a nightly plan's `expect` names only those)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import ClassVar, Protocol

from checker.cluster.availability import AvailabilityChecker
from checker.cluster.defects import DefectChecker
from checker.cluster.elections import ElectionChecker
from checker.core import Checker, Composed, compose
from checker.faults import FAULTS_CHECKER, FaultsChecker
from checker.groups.checker import GroupsChecker
from checker.lin.checker import LinearizabilityChecker
from checker.queue.acks import AcksChecker
from checker.queue.analysis import QueueChecker
from checker.stats import StatsChecker
from checker.transfer import TransferChecker
from checker.txn.checker import TxnChecker

__all__ = ["CHECKERS", "FAULTS_CHECKER", "NEED_NODE_LOGS", "Registered", "anomaly_types",
           "checker_names", "composed"]


class Registered(Checker, Protocol):
    """A checker of the registry: it declares every anomaly type it can report."""

    anomaly_types: ClassVar[tuple[str, ...]]


CHECKERS: dict[str, type[Registered]] = {
    "queue": QueueChecker,
    "acks": AcksChecker,
    "elections": ElectionChecker,
    "defects": DefectChecker,
    "linearizability": LinearizabilityChecker,
    "availability": AvailabilityChecker,
    "txn": TxnChecker,
    "groups": GroupsChecker,
    "transfer": TransferChecker,
    "stats": StatsChecker,
    FAULTS_CHECKER: FaultsChecker,  # every run adds it to its workload's checkers
}
# Checkers that read the nodes' logs of a run folder (a bare history has none).
NEED_NODE_LOGS = frozenset({"elections", "defects"})


def anomaly_types() -> dict[str, tuple[str, ...]]:
    """Every anomaly type a registered checker can report -> the checkers reporting it."""
    found: dict[str, tuple[str, ...]] = {}
    for name, checker in CHECKERS.items():
        for kind in checker.anomaly_types:
            found[kind] = (*found.get(kind, ()), name)
    return found


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
