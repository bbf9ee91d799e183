"""Transactions: dependency cycles and aborted or uncommitted reads."""
