"""The transfer workload's client: input sends, transfer workers, final reads.

`TransferClient` is the confluent queue client of the transfer workload (`ClientOptions`
with the input topic as `topic` and the output keys on the output topic): `send` ops
produce input records with a plain idempotent producer; `subscribe` starts the process's
transfer worker (`workloads.transfer.child`, in a child process, in the op's group, with
the transactional id of the process's worker thread); `txn` ops are transfers, one
transaction each (`TransferMember.transfer`); `crash` closes or kills the worker as
group members are (`workloads.groups.member`); `committed` reads the group's committed
input offsets, retrying while a transaction holds them (UNSTABLE_OFFSET_COMMIT); the final
drain's `assign` and `poll` read both topics from the beginning at read_committed.

Each transfer gets an attempt number, unique in the workload (a counter its clients share),
and its output records have values `<input value>:<attempt>`: a record sent again after
an abort or an unknown outcome is a new value, as Jepsen's checkers expect of every send.
A transfer completes as a `txn` op: `[["poll", {k: [[offset, value], ...]}], ["send",
output key, [offset, "value:attempt"]], ...]` with the input offsets it committed in `offsets`
({"k": next}) and its consumer's rebalance callbacks in `rebalances`. A process that ends
otherwise than by a crash op abandons its worker instead of closing it: the worker
finishes what it was doing and lingers as a zombie (`ConsumerChildren.abandon`).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from workloads.core.client import completed
from workloads.groups.child import ConsumerChildren
from workloads.groups.member import REPLY_GRACE_SECONDS, GroupMember
from workloads.kafka.client import QueueClient
from workloads.transfer.config import TXN_BUDGET, TransferConfig

__all__ = ["Outputs", "TransferClient", "TransferMember"]

RETRY_PAUSE = 0.2


class TransferMember(GroupMember):
    """The parent's side of one transfer worker child."""

    def __init__(self, children: ConsumerChildren, config: TransferConfig,
                 clock: Callable[[], int] | None, attempts: Iterator[int],
                 main: str | Sequence[str]) -> None:
        self.children = children
        self.config = config
        self.clock = clock
        self.attempts = attempts
        self.child = children.start(config, main)
        self.timeout = config.op_timeout + REPLY_GRACE_SECONDS

    def transfer(self, op: Mapping[str, Any]) -> dict[str, Any]:
        reply, failed = self._request(op, "transfer", abort=bool(op.get("abort")),
                                      attempt=next(self.attempts))
        if failed is not None:
            return failed
        result = reply["result"]
        value: list[list[Any]] = [["poll", {key: pairs for key, pairs in result["reads"]}]]
        value += [["send", key, [offset, item]] for key, offset, item in result["outputs"]]
        offsets = {str(key): n for key, n in result["offsets"]} or None
        return completed(op, result["type"], value, error=result.get("error"), offsets=offsets,
                         rebalances=self.rebalances(reply["events"]),
                         errors=", ".join(dict.fromkeys(result["errors"])) or None)

    def close(self) -> None:
        """Abandon the worker: it finishes its transaction (a zombie) and exits."""
        child, self.child = self.child, None
        if child is not None:
            self.children.abandon(child)


@dataclass(frozen=True)
class Outputs:
    """Where each input key's outputs go: its output key (on the output topic)."""

    topic: str
    keys: Mapping[Any, Any]


class TransferClient:
    """`TransferClient(adapter, outputs)` is the unopened factory value, around the unopened
    queue client of the chosen library (`adapter`); `open` opens both. Sends, crashes and
    the final drain are the adapter's; subscribe, transfers and committed reads are this
    client's."""

    def __init__(self, adapter: QueueClient, outputs: Outputs,
                 attempts: Iterator[int] | None = None) -> None:
        self.adapter = adapter
        self.outputs = outputs
        self.attempts = attempts if attempts is not None else itertools.count()

    @property
    def children(self) -> ConsumerChildren:
        return self.adapter.children

    def open(self, test: Any, node: str | None) -> TransferClient:
        return TransferClient(self.adapter.open(test, node), self.outputs, self.attempts)

    def setup(self, test: Any) -> None:
        self.adapter.setup(test)

    def teardown(self, test: Any) -> None:
        self.adapter.teardown(test)

    def close(self, test: Any) -> None:
        self.adapter.close(test)

    def use_clock(self, clock: Callable[[], int]) -> None:
        self.adapter.use_clock(clock)

    def invoke(self, test: Any, op: Mapping[str, Any]) -> dict[str, Any]:
        if op["f"] == "txn":
            member = self.adapter.member
            if not isinstance(member, TransferMember):
                return completed(op, "fail", op["value"], error="not subscribed")
            return member.transfer(op)
        if op["f"] == "subscribe":
            return self._subscribe(op)
        if op["f"] == "committed":
            return self._committed_op(op)
        return self.adapter.invoke(test, op)

    def _subscribe(self, op: Mapping[str, Any]) -> dict[str, Any]:
        adapter = self.adapter
        adapter.close_member()
        producer, main = adapter.transfer_worker(op["process"])
        options = adapter.options
        config = TransferConfig(
            member=adapter.member_config(op["value"]["group"]), producer=producer,
            output_topic=self.outputs.topic,
            outputs={key: (out, options.key_partitions[out])
                     for key, out in self.outputs.keys.items()})
        member = TransferMember(adapter.children, config, adapter.clock, self.attempts, main)
        adapter.member = member
        return member.subscribe(op)

    def _committed_op(self, op: Mapping[str, Any]) -> dict[str, Any]:
        """The group's committed offsets, retrying while they are unstable (a transaction
        holding offsets of the group is still open) until the op's budget is spent."""
        group = op["value"]["group"]
        deadline = time.monotonic() + self.adapter.options.op_timeout * TXN_BUDGET
        while True:
            try:
                found = self.adapter.committed_offsets(group)
                break
            except Exception:
                if time.monotonic() + RETRY_PAUSE >= deadline:
                    raise
                time.sleep(RETRY_PAUSE)
        return completed(op, "ok", {"group": group, "offsets": {
            str(key): offset for key, offset in found.items()}})
