"""The queue workload's client on the Apache Kafka Java client (kafka-clients).

The same behaviour as `workloads.kafka.confluent`, run by `KchaosClient.java` in a child
process per client process (`KchaosClient queue`: a producer and an assign-mode consumer),
spoken to in JSON lines through `workloads.groups.child.ConsumerChild`. A send op is one
request: the child sends each micro-op and waits up to the op timeout for their
acknowledgements; offsets come from each record's metadata. In subscribe mode the
process's group member is a second child (`KchaosClient member`), which a nemesis may
pause as any library's member. `crash` completes as `info`, the worker then closes this
client (the child exits) and opens a fresh one as a new process.

Failed sends carry the error's Kafka protocol name (`Errors.forException`, the same names
the other clients report, classified by `workloads.kafka.errors`), or the exception's class
for errors of the client's own; a record the producer gave up on before it had the
topic's metadata certainly never left (`fail`). The Java producer sends a record once when
`retries` is 0, so a definite rejection then is `fail`.

A `txn` op is one transaction of the child's transactional producer (the worker thread's
transactional id, initialised at the process's first `txn` op): `commitTransaction` ok,
an abort (asked, or after an abortable error) `fail`, and anything uncertain (fenced, a
commit that timed out) `info`, the producer then dropped so that the next op's
`initTransactions` fences what it left. A process that ends with a transaction open
leaves it to that fencing too (the child is closed or killed); the `stall-producer`
nemesis, which needs producers in the harness's own process, has no target here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workloads.core.client import completed
from workloads.groups.child import ChildGone, ConsumerChild, ConsumerChildren, MemberError
from workloads.kafka.client import (
    ClientOptions,
    Delivery,
    QueueClient,
    send_completion,
    transaction_timeout_ms,
)
from workloads.kafka.java.build import JavaRuntime

__all__ = ["JavaClient", "deliveries"]

SETUP_TIMEOUT = 90.0
TXN_BUDGET = 0.8  # of the op timeout, for a transaction to end before the worker gives up
REPLY_GRACE = 10.0  # beyond the op timeout, for a JVM that is starting or collecting
CLOSE_TIMEOUT = 5.0


@dataclass
class _ProcessConfig:
    """The first line of a `KchaosClient queue` child."""

    options: ClientOptions
    group: str = "java client"

    def to_json(self) -> dict[str, Any]:
        options = self.options
        return {"bootstrap_servers": list(options.bootstrap_servers), "topic": options.topic,
                "topics": options.topics(), "replication_factor": options.replication_factor,
                "acks": options.acks, "retries": options.retries,
                "idempotence": options.idempotence, "linger_ms": options.linger_ms,
                "op_timeout_ms": int(options.op_timeout * 1000),
                "max_poll_records": options.max_poll_records,
                "isolation_level": options.isolation_level,
                "transaction_timeout_ms": transaction_timeout_ms(options.op_timeout)}


def deliveries(results: list[Mapping[str, Any]]) -> list[Delivery]:
    """The child's answer to a send, one entry per micro-op, as deliveries: an offset, an
    error (`definite` when the record never left), or nothing yet."""
    found = []
    for result in results:
        if "offset" in result:
            found.append(Delivery(offset=result["offset"], done=True))
        elif "error" in result:
            found.append(Delivery(error=result["error"], done=True,
                                  definite=not result.get("sent", True)))
        else:
            found.append(Delivery())
    return found


class JavaClient(QueueClient):
    """`JavaClient(options)` is the unopened factory value (`options.java` says how to start
    the compiled client); `open` starts the process's child."""

    library = "java"

    def __init__(self, options: ClientOptions, node: str | None = None,
                 children: ConsumerChildren | None = None,
                 processes: ConsumerChildren | None = None, member_mode: str = "member"
                 ) -> None:
        super().__init__(options, node, children if children is not None
                         else ConsumerChildren(spares=options.concurrency))
        if options.java is None:
            raise ValueError("the Java client is not compiled for this run: the harness "
                             "compiles it (workloads.kafka.java.build) before the run")
        self.runtime: JavaRuntime = options.java
        self.member_mode = member_mode
        self.member_main = self.runtime.command(member_mode)
        self.processes = (processes if processes is not None
                          else ConsumerChildren(spares=1))
        self.process: ConsumerChild | None = None
        self._record_keys = options.record_keys()

    # -- lifecycle -----------------------------------------------------------------------

    def _start(self, node: str | None) -> JavaClient:
        client = JavaClient(self.options, node, self.children, self.processes,
                            self.member_mode)
        client.process = self.processes.start(_ProcessConfig(self.options),
                                              self.runtime.command("queue"))
        return client

    def open(self, test: Any, node: str | None) -> JavaClient:
        client = self._start(node)
        if self.options.sub_via == "subscribe":
            self.children.prepare(self.member_main)
        if self.options.sub_via == "assign":
            try:
                client._assign(list(self.options.key_partitions), seek_to_beginning=True)
            except BaseException:
                client.close(test)
                raise
        return client

    def setup(self, test: Any) -> None:
        """Create the topics (partitions = keys) and wait until each partition has a leader."""
        client = self._start(None)
        try:
            client._request("setup", SETUP_TIMEOUT)
        finally:
            client.close(test)

    def teardown(self, test: Any) -> None:
        super().teardown(test)
        self.processes.kill_all()

    def close(self, test: Any) -> None:
        self.close_member()
        process, self.process = self.process, None
        if process is not None:
            self.processes.release(process)
            process.close(CLOSE_TIMEOUT)

    def _request(self, op: str, timeout: float | None = None, **fields: Any) -> Any:
        if self.process is None:
            raise ChildGone("the Java client process is closed")
        wait = timeout if timeout is not None else self.options.op_timeout + REPLY_GRACE
        try:
            return self.process.request(op, wait, **fields)["result"]
        except MemberError as error:
            raise RuntimeError(f"java client: {op}: {error}") from error

    def transfer_worker(self, process: int) -> tuple[dict[str, Any], list[str]]:
        """The transactional producer's settings and the `KchaosClient transfer` command."""
        options = self.options
        return ({"transactional_id": options.transactional_id_of(process),
                 "transaction_timeout_ms": transaction_timeout_ms(options.op_timeout),
                 "linger_ms": options.linger_ms},
                self.runtime.command("transfer"))

    # -- ops -----------------------------------------------------------------------------

    def _send(self, op: Mapping[str, Any]) -> dict[str, Any]:
        options = self.options
        records = [[options.topic_of(key), options.key_partitions[key], str(key), str(value)]
                   for _, key, value in op["value"]]
        answer = self._request("send", records=records)
        return send_completion(op, deliveries(answer), retried=options.retries > 0)

    def _poll(self, op: Mapping[str, Any]) -> dict[str, Any]:
        reads: dict[Any, list[list[Any]]] = {}
        for topic, partition, pairs in self._request(
                "poll", timeout_ms=int(self.options.poll_timeout * 1000)):
            key = self._record_keys[(topic, partition)]
            reads[key] = pairs
            for offset, _ in pairs:
                self.positions.read(key, offset)
        return completed(op, "ok", [["poll", reads]])

    def _txn(self, op: Mapping[str, Any]) -> dict[str, Any]:
        """One Kafka transaction of the child's transactional producer (this worker
        thread's transactional id); a transaction that did not commit leaves the read
        positions where they were before it."""
        options = self.options
        micro = [["send", options.topic_of(m[1]), options.key_partitions[m[1]], str(m[1]),
                  str(m[2])] if m[0] == "send"
                 else ["poll", int(options.poll_timeout * 1000)] for m in op["value"]]
        before = dict(self.positions.next)
        answer = self._request("txn", micro=micro, abort=bool(op.get("abort")),
                               transactional_id=options.transactional_id_of(op["process"]),
                               budget_ms=int(options.op_timeout * TXN_BUDGET * 1000))
        value = []
        for asked, result in zip(op["value"], answer["results"], strict=True):
            if asked[0] == "send":
                value.append(["send", asked[1], [result.get("offset"), asked[2]]])
                continue
            reads = {self._record_keys[(topic, partition)]: pairs
                     for topic, partition, pairs in result["reads"]}
            for key, pairs in reads.items():
                for offset, _ in pairs:
                    self.positions.read(key, offset)
            value.append(["poll", reads])
        if answer["type"] != "ok":
            self.positions.next = before
        return completed(op, answer["type"], value, error=answer.get("error"))

    def _assign(self, keys: list[Any], seek_to_beginning: bool) -> None:
        starts = self.positions.assign(keys, seek_to_beginning)
        options = self.options
        self._request("assign", partitions=[[options.topic_of(key), options.key_partitions[key],
                                             start] for key, start in starts.items()])

    def _end_offsets(self, keys: list[Any]) -> dict[Any, int]:
        partitions = {self.options.key_partitions[key]: key for key in keys}
        answer = self._request("end-offsets", partitions=list(partitions))
        return {partitions[partition]: end for partition, end in answer}

    def committed_offsets(self, group: str) -> dict[Any, int | None]:
        offsets: dict[Any, int | None] = dict.fromkeys(self.options.key_partitions)
        answer = self._request("committed", group=group,
                               partitions=list(self._partition_keys))
        for partition, offset in answer:
            offsets[self._partition_keys[partition]] = offset
        return offsets
