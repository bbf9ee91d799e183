"""Transactions: the coordinator, its state machine, its `__transaction_state` storage and
the markers it writes to partition leaders."""

from broker.txn.coordinator import TransactionCoordinator, TxnConfig
from broker.txn.markers import MarkerWriter
from broker.txn.store import TxnLog

__all__ = ["MarkerWriter", "TransactionCoordinator", "TxnConfig", "TxnLog"]
