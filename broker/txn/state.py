"""The state of one transactional id, and the moves between states Kafka allows.

A `TxnMetadata` is an immutable value: what the transaction log holds for a transactional
id (producer id and epoch, timeout, state, partitions, timestamps) plus the last producer
id and epoch, which only this coordinator's memory keeps (KIP-360 retries). Every change
goes through `transition`, which refuses a move whose previous state is not listed in
`VALID_PREVIOUS_STATES`, as Kafka's `TransactionMetadata.prepareTransitionTo` does:

  Empty             <- Empty, CompleteCommit, CompleteAbort      (InitProducerId)
  Ongoing           <- Ongoing, Empty, CompleteCommit, CompleteAbort (AddPartitions, AddOffsets)
  PrepareCommit     <- Ongoing                                   (EndTxn commit)
  PrepareAbort      <- Ongoing, PrepareEpochFence                (EndTxn abort, fencing, timeout)
  CompleteCommit    <- PrepareCommit                             (every marker written)
  CompleteAbort     <- PrepareAbort
  Dead              <- Empty, CompleteCommit, CompleteAbort      (expiry)
  PrepareEpochFence <- Ongoing                                   (never written to the log)
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import IntEnum

__all__ = ["NO_EPOCH", "NO_PRODUCER_ID", "IllegalTransition", "TxnMetadata", "TxnState",
           "VALID_PREVIOUS_STATES", "epoch_exhausted"]

NO_PRODUCER_ID = -1
NO_EPOCH = -1
MAX_EPOCH = 32767


class TxnState(IntEnum):
    """Kafka's transaction states with their ids in the transaction log."""

    EMPTY = 0
    ONGOING = 1
    PREPARE_COMMIT = 2
    PREPARE_ABORT = 3
    COMPLETE_COMMIT = 4
    COMPLETE_ABORT = 5
    DEAD = 6
    PREPARE_EPOCH_FENCE = 7

    @property
    def label(self) -> str:
        """Kafka's name of the state (DescribeTransactions, the event log)."""
        return "".join(part.capitalize() for part in self.name.split("_"))

    @property
    def is_prepare(self) -> bool:
        return self in (TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT)

    @property
    def is_complete(self) -> bool:
        return self in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)


_S = TxnState
VALID_PREVIOUS_STATES: dict[TxnState, frozenset[TxnState]] = {
    _S.EMPTY: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.ONGOING: frozenset({_S.ONGOING, _S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_COMMIT: frozenset({_S.ONGOING}),
    _S.PREPARE_ABORT: frozenset({_S.ONGOING, _S.PREPARE_EPOCH_FENCE}),
    _S.COMPLETE_COMMIT: frozenset({_S.PREPARE_COMMIT}),
    _S.COMPLETE_ABORT: frozenset({_S.PREPARE_ABORT}),
    _S.DEAD: frozenset({_S.EMPTY, _S.COMPLETE_COMMIT, _S.COMPLETE_ABORT}),
    _S.PREPARE_EPOCH_FENCE: frozenset({_S.ONGOING}),
}


def epoch_exhausted(epoch: int) -> bool:
    """No epoch can follow `epoch` for this producer id (Kafka keeps one spare for fencing)."""
    return epoch >= MAX_EPOCH - 1


class IllegalTransition(Exception):
    """A move between transaction states that Kafka's state machine does not allow."""


@dataclass(frozen=True)
class TxnMetadata:
    transactional_id: str
    producer_id: int
    producer_epoch: int
    timeout_ms: int
    state: TxnState = TxnState.EMPTY
    partitions: frozenset[tuple[str, int]] = frozenset()
    start_ms: int = -1
    last_update_ms: int = -1
    last_producer_id: int = NO_PRODUCER_ID
    last_producer_epoch: int = NO_EPOCH

    def transition(self, state: TxnState, now_ms: int, **changes) -> TxnMetadata:
        """This metadata moved to `state` at `now_ms` with `changes`; IllegalTransition if
        Kafka does not allow the move."""
        if self.state not in VALID_PREVIOUS_STATES[state]:
            allowed = ", ".join(s.label for s in sorted(VALID_PREVIOUS_STATES[state]))
            raise IllegalTransition(
                f"{self.transactional_id}: {self.state.label} -> {state.label} "
                f"(allowed only from {allowed})")
        return replace(self, state=state, last_update_ms=now_ms, **changes)

    def with_partitions(self, added: frozenset[tuple[str, int]], now_ms: int) -> TxnMetadata:
        """Ongoing with `added` partitions; a transaction that begins here starts now."""
        start = now_ms if self.state in (TxnState.EMPTY, *_COMPLETE) else self.start_ms
        return self.transition(TxnState.ONGOING, now_ms, partitions=self.partitions | added,
                               start_ms=start)

    def prepared(self, commit: bool, now_ms: int) -> TxnMetadata:
        return self.transition(TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT,
                               now_ms)

    def completed(self, now_ms: int) -> TxnMetadata:
        """The end of a prepared transaction: its markers are all written."""
        state = (TxnState.COMPLETE_COMMIT if self.state is TxnState.PREPARE_COMMIT
                 else TxnState.COMPLETE_ABORT)
        return self.transition(state, now_ms, partitions=frozenset())

    @property
    def timed_out_at_ms(self) -> int:
        return self.start_ms + self.timeout_ms

    def describe(self) -> dict:
        """The fields the event log records."""
        return {"transactional_id": self.transactional_id, "producer_id": self.producer_id,
                "producer_epoch": self.producer_epoch, "state": self.state.label,
                "partitions": sorted([t, p] for t, p in self.partitions)}


_COMPLETE = (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT)
