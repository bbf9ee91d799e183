"""What the queue workload's Kafka adapters share: options, delivery reports, the op
dispatch and read positions (`QueueClient`), and the timeouts of transactions.

Errors are classified in `workloads.kafka.errors`; exceptions and timeouts become
`info` in the worker.

A `txn` op (`transactional` options) is one Kafka transaction of the adapter's
(`_txn`; only the confluent one runs them, `workloads.kafka.transactions`). Keys may live
on several topics (`key_topics`; the transfer workload's output keys).

Subscribe mode (`sub_via="subscribe"`): a `subscribe` op starts the process's consumer
child in the op's group and `poll`, `commit` and `crash` go to it
(`workloads.groups.member`); the child runs the adapter's `member_main` module (its
library's group member). `committed` reads a group's offsets through a client of no
group (the adapter's `committed_offsets`; a read that raises is `fail`: it changed
nothing); `assign` (the final drain) opens an assign-mode
consumer as in assign mode. Clients that stamp times of their own (the rebalance
callbacks) get the history's clock from the worker (`use_clock`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from workloads.core.client import completed
from workloads.groups.child import ConsumerChildren
from workloads.groups.consumer import MemberConfig
from workloads.groups.member import GroupMember
from workloads.kafka.errors import outcome
from workloads.kafka.java.build import JavaRuntime

__all__ = [
    "ClientOptions",
    "Delivery",
    "drain_idle_polls",
    "LIBRDKAFKA_LOGGER",
    "Positions",
    "QueueClient",
    "send_completion",
    "transaction_timeout_ms",
]

ABORT_CHECK_S = 10.0  # transaction.abort.timed.out.transaction.cleanup.interval.ms default
DRAIN_MARGIN_S = 2.0
LIBRDKAFKA_LOGGER = "kchaos.clients.librdkafka"


@dataclass(frozen=True, kw_only=True)
class ClientOptions:
    """What a Kafka client of the queue workload needs: where, which topic, how each key
    maps to a partition, producer settings, and per-op timeouts."""

    bootstrap_servers: tuple[str, ...]
    topic: str = "kchaos"
    key_partitions: Mapping[Any, int]
    replication_factor: int = 3
    acks: str = "all"
    retries: int = 0
    idempotence: bool = False
    linger_ms: int = 0
    op_timeout: float = 5.0
    poll_timeout: float = 0.5
    max_poll_records: int = 500
    sub_via: str = "assign"
    commit: str = "after-process"
    session_timeout_ms: int = 6000
    key_topics: Mapping[Any, str] = field(default_factory=dict)
    isolation_level: str = "read_committed"
    transactional: bool = False
    transactional_id: str = "kchaos-txn"
    concurrency: int = 1
    java: JavaRuntime | None = None  # the compiled Java client (`--client java` only)
    group_protocol: str = "classic"  # or "consumer" (KIP-848), subscribe mode

    def topic_of(self, key: Any) -> str:
        """The topic of `key`: its own in `key_topics`, else `topic`."""
        return self.key_topics.get(key, self.topic)

    def topics(self) -> dict[str, int]:
        """Each topic of the keys, with its partition count."""
        counts: dict[str, int] = {}
        for key, partition in self.key_partitions.items():
            topic = self.topic_of(key)
            counts[topic] = max(counts.get(topic, 0), partition + 1)
        return counts

    def partition_keys(self) -> dict[int, Any]:
        """partition -> key, for the keys of `topic`."""
        return {partition: key for key, partition in self.key_partitions.items()
                if self.topic_of(key) == self.topic}

    def record_keys(self) -> dict[tuple[str, int], Any]:
        """(topic, partition) -> key, for every key."""
        return {(self.topic_of(key), partition): key
                for key, partition in self.key_partitions.items()}

    def transactional_id_of(self, process: int) -> str:
        """The transactional id of a client process: one per worker thread, so the next
        process of a thread fences the producers its earlier processes left behind."""
        return f"{self.transactional_id}-{process % self.concurrency}"

    def transactional_ids(self) -> tuple[str, ...]:
        """Every worker thread's transactional id (none without transactions)."""
        if not self.transactional:
            return ()
        return tuple(self.transactional_id_of(thread) for thread in range(self.concurrency))

    def bootstrap_for(self, node: str | None) -> list[str]:
        """The bootstrap list with `node` first (clients spread their first connection)."""
        servers = list(self.bootstrap_servers)
        if node in servers:
            servers.remove(node)
            servers.insert(0, node)
        return servers


@dataclass
class Delivery:
    """What became of one send micro-op: its offset, a Kafka error name, or nothing yet;
    `definite` when the client knows the record never left it, whatever the error."""

    offset: int | None = None
    error: str | None = None
    done: bool = False
    definite: bool = False

    def report(self, error: Any, message: Any) -> None:
        """A confluent-kafka delivery callback: the error's name, or the record's offset."""
        self.done = True
        if error is not None:
            self.error = error.name()
        else:
            self.offset = message.offset()


def transaction_timeout_ms(op_timeout: float) -> int:
    """transaction.timeout.ms: a dead producer's open transaction blocks read_committed
    consumers (the LSO) until its coordinator aborts it, so keep it short."""
    return max(10_000, int(op_timeout * 3000))


def drain_idle_polls(op_timeout: float, poll_timeout: float, idle_polls: int) -> int:
    """Empty polls a read_committed drain waits through before it stops: enough to outwait
    a dead producer's open transaction, which holds the last stable offset until its
    coordinator aborts it (the transaction timeout, one abort check at Kafka's default
    interval, and a margin)."""
    wait_s = transaction_timeout_ms(op_timeout) / 1000 + ABORT_CHECK_S + DRAIN_MARGIN_S
    return max(idle_polls, math.ceil(wait_s / poll_timeout))


def send_completion(op: Mapping[str, Any], deliveries: list[Delivery], *, retried: bool,
                    **extra: Any) -> dict[str, Any]:
    """One completion for a send op of several micro-ops: ok when every one was
    acknowledged (offsets from the delivery reports; acks=0 gives none), fail when every
    one certainly failed, info otherwise (an op is not atomic, so part ok is unknown)."""
    kinds, errors = [], []
    for delivery in deliveries:
        if not delivery.done:
            kinds.append("info")
            errors.append("timeout")
        elif delivery.error is not None:
            kinds.append("fail" if delivery.definite
                         else outcome(delivery.error, retried=retried))
            errors.append(delivery.error)
        else:
            kinds.append("ok")
    error = ", ".join(dict.fromkeys(errors)) or None
    if all(kind == "ok" for kind in kinds):
        value = [["send", micro[1], [d.offset if d.offset is not None and d.offset >= 0
                                     else None, micro[2]]]
                 for micro, d in zip(op["value"], deliveries, strict=True)]
        return completed(op, "ok", value, **extra)
    if all(kind == "fail" for kind in kinds):
        return completed(op, "fail", op["value"], error=error, **extra)
    return completed(op, "info", op["value"], error=error, **extra)


class Positions:
    """A consumer's assigned keys and where it will read each next (the offset after the
    last record it returned), so an assign can resume where the client was."""

    def __init__(self) -> None:
        self.assigned: list[Any] = []
        self.next: dict[Any, int] = {}

    def assign(self, keys: list[Any], seek_to_beginning: bool) -> dict[Any, int | None]:
        """Start offsets for `keys`: None (the beginning) or the next offset to read."""
        if seek_to_beginning:
            for key in keys:
                self.next.pop(key, None)
        self.assigned = list(keys)
        return {key: self.next.get(key) for key in keys}

    def read(self, key: Any, offset: int) -> None:
        self.next[key] = offset + 1


class QueueClient:
    """What the Kafka adapters share: the unopened factory value (`Adapter(options)`; `open`
    returns a connected copy), the op dispatch, the read positions and, in subscribe mode,
    the process's group member. Subclasses name their `library`, connect in `open` and
    implement `_send`, `_poll`, `_assign`, `committed_offsets` and `_end_offsets`.
    `children` is the workload's registry of consumer child processes, shared by the
    factory value and its copies; `member_main` the module whose `main` serves a consumer
    child of the adapter's library (or the command line of one, for a client not in
    Python)."""

    library = ""
    member_main: str | Sequence[str] = ""

    def __init__(self, options: ClientOptions, node: str | None = None,
                 children: ConsumerChildren | None = None) -> None:
        self.options = options
        self.node = node
        self.producer: Any = None
        self.consumer: Any = None
        self.positions = Positions()
        self.children = children if children is not None else ConsumerChildren()
        self.member: GroupMember | None = None
        self.clock: Callable[[], int] | None = None
        self._partition_keys = options.partition_keys()

    def use_clock(self, clock: Callable[[], int]) -> None:
        """The history's clock (ns since the test started), for the callbacks' times."""
        self.clock = clock

    def teardown(self, test: Any) -> None:
        """Kill any consumer child still running."""
        self.children.kill_all()

    def invoke(self, test: Any, op: Mapping[str, Any]) -> dict[str, Any]:
        f = op["f"]
        if f == "send":
            return {**self._send(op), "acks": self.options.acks}
        if f == "txn":
            return self._txn(op)
        if f == "subscribe":
            return self._subscribe(op)
        if f == "poll":
            return self.member.poll(op) if self.member is not None else self._poll(op)
        if f == "commit":
            if self.member is None:
                return completed(op, "fail", op.get("value"), error="not subscribed")
            return self.member.commit(op)
        if f == "committed":
            group = op["value"]["group"]
            try:
                found = self.committed_offsets(group)
            except Exception as error:
                return completed(op, "fail", op["value"],
                                 error=f"{type(error).__name__}: {error}")
            return completed(op, "ok", {"group": group, "offsets": {
                str(key): offset for key, offset in found.items()}})
        if f == "assign":
            self._assign(list(op["value"]), bool(op.get("seek_to_beginning")))
            return completed(op, "ok", op["value"])
        if f == "end-offsets":
            return completed(op, "ok", {str(key): end for key, end in
                                        self._end_offsets(list(op["value"])).items()})
        if f == "crash":
            if self.member is not None:
                return self.member.crash(op)
            return completed(op, "info", op.get("value"))
        raise ValueError(f"unknown f {f!r} for the queue client")

    def member_config(self, group: str) -> MemberConfig:
        options = self.options
        return MemberConfig(
            bootstrap_servers=tuple(options.bootstrap_for(self.node)),
            topic=options.topic, group=group, partition_keys=self._partition_keys,
            commit=options.commit, session_timeout_ms=options.session_timeout_ms,
            poll_timeout=options.poll_timeout, max_poll_records=options.max_poll_records,
            op_timeout=options.op_timeout, group_protocol=options.group_protocol)

    def _subscribe(self, op: Mapping[str, Any]) -> dict[str, Any]:
        if self.member is not None:
            self.member.close()
        self.member = GroupMember(self.children, self.member_config(op["value"]["group"]),
                                  self.clock, self.member_main)
        return self.member.subscribe(op)

    def close_member(self) -> None:
        member, self.member = self.member, None
        if member is not None:
            member.close()

    def committed_offsets(self, group: str) -> dict[Any, int | None]:
        """key -> the group's committed (next) offset, None where it has none."""
        raise NotImplementedError

    def _end_offsets(self, keys: list[Any]) -> dict[Any, int]:
        """key -> the key's end offset as the broker answers ListOffsets for the latest
        offset, read_uncommitted: its high watermark."""
        raise NotImplementedError

    def _send(self, op: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _poll(self, op: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError

    def _txn(self, op: Mapping[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{self.library} runs no transactions")

    def transfer_worker(self, process: int) -> tuple[dict[str, Any], str | Sequence[str]]:
        """What a transfer worker of this library needs for `process`: its transactional
        producer's settings, and the module or command line of its child."""
        raise NotImplementedError(f"{self.library} runs no transfer workers")

    def _assign(self, keys: list[Any], seek_to_beginning: bool) -> None:
        raise NotImplementedError
