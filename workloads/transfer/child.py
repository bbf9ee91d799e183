"""A transfer worker on confluent-kafka in a child process of its own: consume, transform,
produce, exactly once. (`KchaosClient transfer`, workloads/kafka/java, is the same worker on
the Java client, speaking the same protocol.)

The transfer workload's workers run one per child process, as the group consumers do
(`workloads.groups.child` starts it; a nemesis can SIGSTOP it, a crash can SIGKILL it).
The child holds a group consumer of the input topic (confluent-kafka, isolation.level
read_committed, no auto commit; its rebalance callbacks recorded as
`workloads.kafka.confluent_member` does) and a transactional producer (`TxnProducer`) whose
transactional id is its worker thread's. The parent speaks JSON lines:

    first line  `TransferConfig` as an object
    request     {"id": n, "op": "subscribe" | "transfer" | "close", "abort": bool,
                 "attempt": n (transfer only)}
    reply       {"id": n, "result": ..., "events": [...]} or {"id": n, "error": ..., ...}

`subscribe` subscribes and initialises the producer (fencing the thread's earlier ones).
`transfer` is one transaction: a poll of the input; when it returned records, one output
record per input record (value `<input value>:<attempt>`, the request's attempt number
making every output record unique, to the output partition of the input's key),
the input offsets after them sent to the transaction with the consumer's group metadata
(KIP-447), then commit, or abort on purpose (`"abort": true`) or after a failure. Its
result: {"type": ok | fail | info, "error", "reads": [[key, [[offset, value], ...]], ...],
"outputs": [[output key, offset or null, value], ...], "offsets": [[key, next], ...],
"errors": [...]}. After an abort the consumer seeks back to the first offset it read of
each key, so the next transfer reads the same records again; if it cannot, the outcome
is `info` (the parent replaces the process).

When its stdin closes (the parent abandoned it after an unknown outcome) the child does
not close anything: it keeps retrying the end of a pending transaction for a while, as a
zombie, and exits.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaException, TopicPartition

from workloads.groups.consumer import Reads, next_offsets
from workloads.kafka.client import LIBRDKAFKA_LOGGER, Delivery
from workloads.kafka.confluent_member import ConfluentMember
from workloads.kafka.transactions import ZOMBIE_SECONDS, TxnProducer
from workloads.transfer.config import TXN_BUDGET, TransferConfig

__all__ = ["TransferWorker", "main"]

INIT_BUDGET = 0.5  # of the op timeout: the subscribe op also waits for the child to start


class TransferConsumer(ConfluentMember):
    """The input side: a group member reading only committed records."""

    def _consumer_config(self) -> dict[str, Any]:
        return {**super()._consumer_config(), "isolation.level": "read_committed"}


class TransferWorker:
    """The child's state: the group consumer and the transactional producer."""

    def __init__(self, config: TransferConfig) -> None:
        self.config = config
        self.consumer = TransferConsumer(config.member)
        self.events = self.consumer.events
        self.txn = TxnProducer({**config.producer,
                                "logger": logging.getLogger(LIBRDKAFKA_LOGGER)})

    def subscribe(self) -> None:
        self.consumer.subscribe()
        self.txn.init(self.config.op_timeout * INIT_BUDGET)

    def transfer(self, abort: bool, attempt: int) -> dict[str, Any]:
        deadline = time.monotonic() + self.config.op_timeout * TXN_BUDGET
        reads, errors = self.consumer.fetch()
        result: dict[str, Any] = {"reads": [[key, pairs] for key, pairs in reads.items()],
                                  "errors": errors, "outputs": [], "offsets": []}
        if not reads:
            return {**result, "type": "ok", "error": None}
        offsets = next_offsets(reads)
        sent: list[tuple[Any, Any, Delivery]] = []
        with self.txn.lock:
            try:
                self.txn.begin()
            except KafkaException as error:
                return {**result, "type": "info", "error": f"begin_transaction: {error}"}
            try:
                self._produce(reads, attempt, sent)
                self.txn.send_offsets(self._partitions(offsets),
                                      self.consumer.consumer.consumer_group_metadata(), deadline)
                kind, error = self.txn.end([d for _, _, d in sent], deadline, abort=abort,
                                           why="aborted on purpose")
            except (KafkaException, BufferError) as failure:
                kind, error = self.txn.failed(failure, deadline)
        if kind == "fail" and not self._rewind(reads):
            kind, error = "info", f"{error}; the consumer could not seek back"
        outputs = [[key, delivery.offset if delivery.error is None else None, value]
                   for key, value, delivery in sent]
        return {**result, "type": kind, "error": error, "outputs": outputs,
                "offsets": [[key, n] for key, n in offsets.items()]}

    def _produce(self, reads: Reads, attempt: int, sent: list[tuple[Any, Any, Delivery]]
                 ) -> None:
        for key, pairs in reads.items():
            out, partition = self.config.outputs[key]
            for _, value in pairs:
                delivery = Delivery()
                output = f"{value}:{attempt}"
                sent.append((out, output, delivery))
                self.txn.produce(self.config.output_topic, partition, out, output, delivery)

    def _partitions(self, offsets: Mapping[Any, int]) -> list[TopicPartition]:
        partitions = self.config.member.key_partitions
        return [TopicPartition(self.config.member.topic, partitions[key], n)
                for key, n in offsets.items()]

    def _rewind(self, reads: Reads) -> bool:
        """Seek every key read back to its first record read, if still assigned."""
        consumer = self.consumer.consumer
        topic, partitions = self.config.member.topic, self.config.member.key_partitions
        try:
            assigned = {(p.topic, p.partition) for p in consumer.assignment()}
            for key, pairs in reads.items():
                if (topic, partitions[key]) in assigned:
                    consumer.seek(TopicPartition(topic, partitions[key], pairs[0][0]))
        except KafkaException:
            return False
        return True

    def close(self) -> None:
        self.consumer.close()


def handle(worker: TransferWorker, request: Mapping[str, Any]) -> Any:
    op = request["op"]
    if op == "subscribe":
        worker.subscribe()
        return None
    if op == "transfer":
        return worker.transfer(bool(request.get("abort")), int(request["attempt"]))
    if op == "close":
        worker.close()
        return None
    raise ValueError(f"unknown request {op!r}")


def main() -> None:
    """Serve the parent until `close`; at the end of stdin, linger as a zombie; then exit
    at once (library threads must not keep the process alive)."""
    worker = TransferWorker(TransferConfig.from_json(json.loads(sys.stdin.readline())))
    for line in sys.stdin:
        request = json.loads(line)
        reply: dict[str, Any] = {"id": request["id"]}
        try:
            reply["result"] = handle(worker, request)
        except Exception as error:
            reply["error"] = f"{type(error).__name__}: {error}"
        reply["events"] = worker.events.take()
        try:
            sys.stdout.write(json.dumps(reply) + "\n")
            sys.stdout.flush()
        except (BrokenPipeError, ValueError, OSError):
            break
        if request["op"] == "close":
            os._exit(0)
    if worker.txn.pending:
        print(f"abandoned with a transaction pending, as a zombie: "
              f"{worker.txn.finish_as_zombie(ZOMBIE_SECONDS)}", file=sys.stderr, flush=True)
    os._exit(0)
