"""Kafka transactions on confluent-kafka: one transactional producer and how its
transactions end, shared by the queue workload's `txn` ops and the transfer workers.

`TxnProducer` wraps a librdkafka producer with a `transactional.id`: `init` once, then
per transaction `begin`, `produce` (delivery reports into `Delivery` values),
`send_offsets` (KIP-447: the consumer's group metadata), and `end`, which says what became
of the transaction as a history op type:

- `ok`: committed (flushed, every delivery acknowledged, commit_transaction returned);
- `fail`: certainly not committed: aborted on purpose, or after an abortable error
  (`txn_requires_abort`), a failed delivery or a flush that ran out of time, and the
  abort_transaction call returned;
- `info`: anything uncertain: a commit that timed out or failed without asking for an
  abort, a fatal error (fenced), an abort that did not complete.

Retriable errors of commit, abort and send_offsets are retried until the deadline.
`pending` stays true while the transaction's end is unknown.

`Zombies` keeps producers abandoned with a pending transaction alive for a while, retrying
the end they were after (commit or abort) as an application that did not notice its death
would: the next process of the same worker thread initialises the same transactional id,
which must fence them (a broker that fails to lets a zombie commit).

A nemesis makes zombies on purpose through `Zombies.stall_next`: the next transaction
about to commit, its sends all acknowledged, stalls (a GC pause before the commit); its
process goes on with a new producer of the same transactional id, whose InitProducerId
fences the stalled one (its transaction is aborted once that returns), and the stalled
producer wakes after the asked seconds and commits, as a zombie.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from typing import Any, Literal

from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition

from workloads.core.client import CLIENT_LOGGERS
from workloads.kafka.client import Delivery

__all__ = ["TxnProducer", "Zombies", "error_of"]

log = logging.getLogger(f"{CLIENT_LOGGERS[0]}.txn")
End = tuple[Literal["ok", "fail", "info"], str | None]
RETRY_PAUSE = 0.1
# Retriable in Kafka's protocol, whether or not librdkafka flags the error so.
RETRIABLE_CODES = frozenset({KafkaError.CONCURRENT_TRANSACTIONS,
                             KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                             KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_COORDINATOR})
ZOMBIE_SECONDS = 30.0


def error_of(exception: BaseException) -> KafkaError | None:
    """The KafkaError a KafkaException carries, if any."""
    if isinstance(exception, KafkaException) and exception.args and isinstance(
            exception.args[0], KafkaError):
        return exception.args[0]
    return None


def _retriable(error: KafkaError | None) -> bool:
    return error is not None and not error.fatal() and not error.txn_requires_abort() and (
        error.retriable() or error.code() in RETRIABLE_CODES)


def _name(exception: BaseException) -> str:
    error = error_of(exception)
    return error.name() if error is not None else f"{type(exception).__name__}: {exception}"


class TxnProducer:
    """A transactional producer; see the module docstring."""

    def __init__(self, config: Mapping[str, Any],
                 make: Callable[[dict[str, Any]], Any] = Producer) -> None:
        self.producer = make(dict(config))
        self.name = str(config.get("transactional.id"))
        self.lock = threading.RLock()
        self.ready = False
        self.pending = False
        self.intent: Literal["commit", "abort"] = "abort"

    def init(self, timeout: float) -> None:
        """init_transactions (InitProducerId: fences the id's earlier producers), again
        after retriable errors (the id's last transaction still ending) until `timeout`;
        raises KafkaException."""
        self._retrying(self.producer.init_transactions, time.monotonic() + max(timeout, 0.1))
        self.ready = True

    def begin(self) -> None:
        self.producer.begin_transaction()
        self.pending = True
        self.intent = "abort"

    def produce(self, topic: str, partition: int, key: Any, value: Any,
                delivery: Delivery) -> None:
        self.producer.produce(topic, value=str(value).encode(), key=str(key).encode(),
                              partition=partition, on_delivery=delivery.report)

    def send_offsets(self, offsets: list[TopicPartition], metadata: Any,
                     deadline: float) -> None:
        self._retrying(lambda left: self.producer.send_offsets_to_transaction(
            offsets, metadata, left), deadline)

    def flushed(self, deliveries: list[Delivery], deadline: float) -> bool:
        """Whether every send of the transaction was acknowledged once its producer is
        flushed (until `deadline`)."""
        try:
            self.producer.flush(max(deadline - time.monotonic(), 0))
        except KafkaException:
            return False
        return all(d.done and d.error is None for d in deliveries)

    def end(self, deliveries: list[Delivery], deadline: float, *, abort: bool = False,
            why: str | None = None) -> End:
        """Commit, or abort when asked (`why` says why); the op type and error that
        describe the outcome."""
        try:
            self.producer.flush(max(deadline - time.monotonic(), 0))
        except KafkaException as error:
            return self.failed(error, deadline)
        failed = [d.error for d in deliveries if d.done and d.error is not None]
        if failed or not all(d.done for d in deliveries):
            return self._abort(deadline, ", ".join(dict.fromkeys(failed)) or "flush timed out")
        if abort:
            return self._abort(deadline, why)
        self.intent = "commit"
        try:
            self._retrying(self.producer.commit_transaction, deadline)
        except KafkaException as error:
            kafka_error = error_of(error)
            if kafka_error is not None and kafka_error.txn_requires_abort():
                return self._abort(deadline, _name(error))
            return "info", f"commit: {_name(error)}"
        self.pending = False
        return "ok", None

    def failed(self, exception: BaseException, deadline: float) -> End:
        """The end after a producer call raised inside the transaction: a fatal error
        leaves it unknown; any other is aborted."""
        error = error_of(exception)
        if error is not None and error.fatal():
            return "info", _name(exception)
        return self._abort(deadline, _name(exception))

    def _abort(self, deadline: float, why: str | None) -> End:
        self.intent = "abort"
        try:
            self._retrying(self.producer.abort_transaction, deadline)
        except KafkaException as error:
            return "info", f"abort: {_name(error)}" + (f" (after {why})" if why else "")
        self.pending = False
        return "fail", why or "aborted on purpose"

    def _retrying(self, call: Callable[[float], Any], deadline: float) -> None:
        """`call(seconds left)` again after retriable errors, until the deadline."""
        while True:
            try:
                call(max(deadline - time.monotonic(), 0.05))
                return
            except KafkaException as exception:
                if not _retriable(error_of(exception)) \
                        or time.monotonic() + RETRY_PAUSE >= deadline:
                    raise
                time.sleep(RETRY_PAUSE)

    def finish_as_zombie(self, seconds: float) -> str:
        """Keep retrying the intended end of a pending transaction for `seconds`; what
        became of it, in words (also logged)."""
        deadline = time.monotonic() + seconds
        with self.lock:
            if not self.pending:
                return "nothing pending"
            outcome = "out of time"
            while self.pending and time.monotonic() < deadline:
                call = (self.producer.commit_transaction if self.intent == "commit"
                        else self.producer.abort_transaction)
                try:
                    call(max(min(deadline - time.monotonic(), 5.0), 0.1))
                    self.pending = False
                    outcome = f"{self.intent} went through"
                except KafkaException as exception:
                    outcome = f"{self.intent} failed: {_name(exception)}"
                    if not _retriable(error_of(exception)):
                        break
                    time.sleep(RETRY_PAUSE)
        log.info("zombie producer %s: %s", self.name, outcome)
        return outcome


class Zombies:
    """Abandoned producers with a pending transaction: each keeps trying to end it for
    `seconds`, on a thread of its own, then is let go (`release_all` lets all go); and the
    stall a nemesis asked for (`stall_next`), which the next committing transaction takes
    (`take_stall`)."""

    def __init__(self, seconds: float = ZOMBIE_SECONDS) -> None:
        self.seconds = seconds
        self._lock = threading.Lock()
        self._held: list[TxnProducer] = []
        self._stall: _Stall | None = None

    def adopt(self, txn: TxnProducer, delay: float = 0.0) -> None:
        """Keep `txn` trying to end its transaction, after `delay` seconds of silence."""
        with self._lock:
            self._held.append(txn)
        threading.Thread(target=self._haunt, args=(txn, delay), name="txn-zombie",
                         daemon=True).start()

    def _haunt(self, txn: TxnProducer, delay: float) -> None:
        started = time.monotonic()
        time.sleep(delay)
        txn.finish_as_zombie(self.seconds)
        time.sleep(max(delay + self.seconds - (time.monotonic() - started), 0))
        with self._lock:
            if txn in self._held:
                self._held.remove(txn)

    def count(self) -> int:
        with self._lock:
            return len(self._held)

    def release_all(self) -> None:
        with self._lock:
            self._held.clear()
            self._stall = None

    def stall_next(self, seconds: float, within: float) -> str | None:
        """Ask the next transaction about to commit to stall for `seconds` before its
        commit; the transactional id that took the stall, or None when no transaction
        came to commit within `within` seconds (the request is then withdrawn)."""
        request = _Stall(seconds)
        with self._lock:
            self._stall = request
        request.taken.wait(within)
        with self._lock:
            if self._stall is request:
                self._stall = None
            return request.txn_id

    def stall_asked(self) -> bool:
        return self._stall is not None

    def take_stall(self, txn: TxnProducer) -> float | None:
        """The seconds `txn` is to stall before its commit, if a stall is asked (it is then
        taken: one transaction stalls per request); None otherwise."""
        with self._lock:
            request, self._stall = self._stall, None
            if request is None:
                return None
            request.txn_id = txn.name
            request.taken.set()
            return request.seconds


class _Stall:
    """A nemesis's request that the next committing transaction stall."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.taken = threading.Event()
        self.txn_id: str | None = None
