"""The transfer workload: consume-transform-produce, exactly once.

Input records are produced during the whole run, not as a fixed set up front: a fixed
set would be transferred in the first seconds and leave the workers idle while the
faults play out, where a steady stream keeps transactions open at every fault. Client
thread t's processes all do two things, mixed at random:

- `send` ops put records on the input topic (`topic`, key k = partition k, unique integer
  values) with a plain idempotent producer, as the queue workload's sends;
- `txn` ops are transfers by the process's transfer worker (`workloads.transfer.client`,
  a child process): in one Kafka transaction, the records its group consumer polled
  (isolation.level read_committed, no auto commit) go to the output topic, one output
  record per input record, valued `<input value>:<attempt>` (each transfer's attempt
  number is unique), on output key `keys + k` (partition k of `output_topic`), and the
  input offsets after them are committed in the transaction
  with the consumer's group metadata (KIP-447 generation fencing). A fraction
  `abort_rate` of transfers are aborted on purpose;
- now and then a `crash` (the worker closes, or is killed without leaving its group).

Every process subscribes first, in the one consumer group g0, with the transactional id of
its worker thread, so a process started after an unknown outcome fences the zombie its
predecessor left. The final phase: transfers until every worker is idle (the input is
drained), the workers close, the group's committed offsets are read (`committed`), and
both topics are drained from the beginning at read_committed.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from workloads.core import generator as gen
from workloads.core.final import Drain
from workloads.core.part import Workload, WorkloadContext, WorkloadKind
from workloads.groups import ops as group_ops
from workloads.kafka.client import ClientOptions, QueueClient, drain_idle_polls
from workloads.kafka.java.build import JavaRuntime
from workloads.queue import MIN_SESSION_TIMEOUT_MS, SendGenerator
from workloads.transfer.client import Outputs, TransferClient

__all__ = ["CHECKERS", "KIND", "TRANSFER_CLIENTS", "TransferGenerator", "TransferOptions",
           "transfer_workload"]

CHECKERS = ("transfer", "queue", "txn", "acks", "elections", "availability", "stats")
COMMIT = "in-transaction"  # GroupOps adds commit ops only for after-process
TRANSFER_CLIENTS = ("confluent", "java")


@dataclass(frozen=True, kw_only=True)
class TransferOptions:
    """The transfer workload's options: fields with `help` are the user's (flags and TOML
    keys); the others are set by the harness or by tests."""

    client: str = field(default="confluent", metadata={
        "help": "Kafka client of the transfer workers and the sends",
        "choices": TRANSFER_CLIENTS})
    java_client_version: str | None = field(default=None, metadata={
        "help": "the Java client's kafka-clients version (default: the cluster's Kafka "
                "version, 3.9.1 on our broker)", "metavar": "VERSION"})
    keys: int = field(default=4, metadata={"help": "keys = partitions"})
    concurrency: int = field(default=6, metadata={"help": "client threads"})
    rate: float = field(default=100.0, metadata={"help": "ops per second over all clients"})
    op_timeout: float = field(default=5.0, metadata={"help": "per-op timeout",
                                                     "metavar": "SECONDS"})
    session_timeout_ms: int = field(default=6000, metadata={
        "help": "consumer group session timeout in subscribe mode", "metavar": "MS"})
    abort_rate: float = field(default=0.0, metadata={
        "help": "fraction of transactions aborted on purpose, 0 to 1 (queue: its txn ops, "
                "with --txn; transfer: its transfers)",
        "metavar": "R"})
    bootstrap_servers: tuple[str, ...] = ()
    topic: str = "kchaos-in"
    output_topic: str = "kchaos-out"
    replication_factor: int = 3
    poll_timeout: float = 0.5
    send_weight: float = 0.5
    transfer_weight: float = 0.49
    crash_weight: float = 0.01
    seed: int = 0
    drain_idle_polls: int = 10
    java_runtime: JavaRuntime | None = None  # the compiled Java client, set by the harness

    def __post_init__(self) -> None:
        if self.client not in TRANSFER_CLIENTS:
            raise ValueError(f"the transfer workload runs on {' or '.join(TRANSFER_CLIENTS)} "
                             f"(clients of transactions with sendOffsetsToTransaction), not "
                             f"{self.client!r}: set --client confluent or --client java")
        if self.java_client_version is not None and self.client != "java":
            raise ValueError(f"--java-client-version {self.java_client_version} is for the "
                             f"Java client, not {self.client}: add --client java or drop it")
        if self.keys < 1:
            raise ValueError(f"keys must be >= 1, got {self.keys}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate:g}")
        if self.op_timeout <= 0:
            raise ValueError(f"op_timeout must be > 0 seconds, got {self.op_timeout:g}")
        if self.session_timeout_ms < MIN_SESSION_TIMEOUT_MS:
            raise ValueError(f"session_timeout_ms must be >= {MIN_SESSION_TIMEOUT_MS}, got "
                             f"{self.session_timeout_ms}: brokers reject shorter sessions "
                             "(group.min.session.timeout.ms)")
        if not 0 <= self.abort_rate <= 1:
            raise ValueError(f"abort_rate must be between 0 and 1, got {self.abort_rate:g}: "
                             "it is the fraction of transfers aborted on purpose")
        if self.topic == self.output_topic:
            raise ValueError(f"the input and output topics must differ, both are {self.topic}")

    def outputs(self) -> dict[int, int]:
        """Input key -> output key."""
        return {key: self.keys + key for key in range(self.keys)}

    def client_options(self) -> ClientOptions:
        outputs = self.outputs()
        return ClientOptions(
            bootstrap_servers=tuple(self.bootstrap_servers), topic=self.topic,
            key_partitions={**{key: key for key in outputs},
                            **{out: key for key, out in outputs.items()}},
            key_topics={out: self.output_topic for out in outputs.values()},
            replication_factor=self.replication_factor, acks="all", retries=1_000_000,
            idempotence=True, op_timeout=self.op_timeout, poll_timeout=self.poll_timeout,
            sub_via="subscribe", commit=COMMIT, session_timeout_ms=self.session_timeout_ms,
            isolation_level="read_committed", transactional_id=f"{self.topic}-transfer",
            concurrency=self.concurrency, java=self.java_runtime)

    def test_fields(self) -> dict[str, Any]:
        """What test.json records of these options (the checkers read them)."""
        fields = {"acks": "all", "idempotence": True, "subscribe": True, "client": self.client,
                  "txn": True, "isolation_level": "read_committed",
                  "abort_rate": self.abort_rate, "groups": 1,
                  "session_timeout_ms": self.session_timeout_ms}
        if self.java_runtime is not None:
            fields["java_client_version"] = self.java_runtime.version
        return fields


@dataclass(frozen=True)
class TransferGenerator:
    """Transfer ops (`txn` ops of one poll), a fraction `abort_rate` marked
    `"abort": true`."""

    seed: int
    abort_rate: float = 0.0

    def op(self, test: Any, ctx: gen.Context) -> tuple[dict, Any] | Any:
        rng = random.Random(self.seed)
        item: dict[str, Any] = {"f": "txn", "value": [["poll"]]}
        if rng.random() < self.abort_rate:
            item["abort"] = True
        filled = gen.fill_in(item, ctx)
        if filled is gen.PENDING:
            return gen.PENDING
        return filled, replace(self, seed=rng.getrandbits(63))

    def update(self, test: Any, ctx: gen.Context, event: Mapping[str, Any]
               ) -> TransferGenerator:
        return self


def transfer_workload(options: TransferOptions) -> Workload:
    """The transfer workload for `options`."""
    seeds = random.Random(options.seed)
    sources = [(options.send_weight, SendGenerator(options.keys, 1, seeds.getrandbits(63))),
               (options.transfer_weight,
                TransferGenerator(seeds.getrandbits(63), options.abort_rate)),
               (options.crash_weight, group_ops.GroupCrash(seeds.getrandbits(63)))]
    chosen = [(weight, source) for weight, source in sources if weight > 0]
    ops = gen.mix([s for _, s in chosen], seeds.getrandbits(63), [w for w, _ in chosen])
    generator = group_ops.GroupOps(gen.stagger(1.0 / options.rate, ops, seeds.getrandbits(63)),
                                   1, COMMIT)
    idle_ns = options.session_timeout_ms * 1_000_000 + group_ops.REBALANCE_SLACK_NS
    outputs = options.outputs()
    final_generator = gen.phases(
        group_ops.GroupOps(group_ops.FinalPolls(options.drain_idle_polls, idle_ns, f="txn"),
                           1, COMMIT),
        group_ops.WithGroup(gen.each_thread({"f": "crash", "value": "close"}), 1),
        group_ops.committed_reads(1),
        Drain((*outputs, *outputs.values()),
              drain_idle_polls(options.op_timeout, options.poll_timeout,
                               options.drain_idle_polls), crash_first=True))
    client_options = options.client_options()
    client = TransferClient(_adapter(options.client, client_options),
                            Outputs(options.output_topic, outputs))
    key_partitions = {**{key: (options.topic, key) for key in outputs},
                      **{out: (options.output_topic, key) for key, out in outputs.items()}}
    return Workload(
        client=client, generator=generator, final_generator=final_generator,
        key_partitions=key_partitions, concurrency=options.concurrency,
        test_fields=options.test_fields(), op_timeout=options.op_timeout,
        topic=options.topic, group_ids=tuple(group_ops.group_names(1)),
        children=client.children, txn_ids=client_options.transactional_ids())


def _adapter(name: str, options: ClientOptions) -> QueueClient:
    """The library's unopened queue client, its group children transfer workers."""
    if name == "java":
        from workloads.kafka.java.client import JavaClient
        return JavaClient(options, member_mode="transfer")
    from workloads.kafka.confluent import ConfluentClient
    return ConfluentClient(options)


def build(options: TransferOptions, context: WorkloadContext) -> Workload:
    """The transfer workload against a running db."""
    return transfer_workload(replace(options, bootstrap_servers=context.bootstrap_servers,
                                     replication_factor=min(3, context.brokers),
                                     seed=context.seed))


KIND = WorkloadKind(TransferOptions, build, CHECKERS)
