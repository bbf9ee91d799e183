"""Where a transactional id lives: partition `abs(javaStringHashCode(id)) % n` of
`__transaction_state`, whose leader is the id's transaction coordinator."""

from __future__ import annotations

__all__ = ["TRANSACTION_TOPIC"]

TRANSACTION_TOPIC = "__transaction_state"
