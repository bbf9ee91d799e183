"""The queue workload, as Jepsen's Kafka workload in assign mode.

Keys 0..n-1 map onto partitions of one topic ("kchaos"; key k -> partition k), created
with the test's replication factor. Ops (docs/history-format.md): `send` of one or a few
micro-ops `["send", k, v]` with unique integer values, `poll` (`[["poll"]]`), `assign`
(a random non-empty set of keys, seeking to the beginning or resuming) and, when asked
for, `crash` (the client is closed and reopened as a new process). The generator is
pure and seeded; the final generator drains every key from the beginning.

With `sub_via="subscribe"` (the groups history contract) consumers
subscribe in consumer groups instead: client thread t is a member of group
g{t mod groups}, each process runs its consumer in a child process, commits follow
`commit` (auto, after-process, before-process), crashes close or abandon the member, and
the final phase adds group polls, closes and `committed` reads before the drain
(`workloads.groups.ops`). The workload then also needs the `groups` checker, and exposes
`consumer_pids()`, `groups()` and `topic` for nemeses that pause consumers.

With `txn` (confluent client, assign mode, acks=all) the sends and polls
come as `txn` ops, as in Jepsen's Kafka workload: each a list of 1..`max_txn_ops`
micro-ops `["send", k, v]` and `["poll"]` run as one Kafka transaction by a transactional
producer (one transactional id per worker thread) beside a consumer at `isolation_level`;
a fraction `abort_rate` of them carry `"abort": true` and are aborted on purpose. The
workload then also needs the `txn` checker.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from workloads.core import final
from workloads.core import generator as gen
from workloads.core.client import Client
from workloads.core.part import Workload, WorkloadContext, WorkloadKind
from workloads.groups import ops as group_ops
from workloads.groups.consumer import COMMIT_MODES
from workloads.kafka.client import ClientOptions, drain_idle_polls
from workloads.kafka.java.build import JavaRuntime

__all__ = ["ACKS", "CHECKERS", "CLIENTS", "COMMIT_MODES", "GROUP_PROTOCOLS", "ISOLATION_LEVELS",
           "KIND",
           "QueueOptions", "SUB_VIA", "SendGenerator", "TxnGenerator", "checkers",
           "client_factory", "queue_workload"]

CLIENTS = ("confluent", "kafka-python", "java")
GROUP_PROTOCOLS = ("classic", "consumer")
TXN_CLIENTS = ("confluent", "java")
KIP848_CLIENTS = ("confluent", "java")
ACKS = ("0", "1", "all")
SUB_VIA = ("assign", "subscribe")
ISOLATION_LEVELS = ("read_committed", "read_uncommitted")
CHECKERS = ("queue", "acks", "elections", "defects", "availability", "stats")
GROUP_CHECKERS = (*CHECKERS, "groups")
TXN_CHECKERS = (*CHECKERS, "txn")
MIN_SESSION_TIMEOUT_MS = 1000


@dataclass(frozen=True, kw_only=True)
class QueueOptions:
    """The queue workload's options: fields with `help` are the user's (flags and TOML keys,
    see `harness.options`); the others are set by the harness or by tests."""

    client: str = field(default="confluent", metadata={"help": "Kafka client",
                                                       "choices": CLIENTS})
    java_client_version: str | None = field(default=None, metadata={
        "help": "the Java client's kafka-clients version (default: the cluster's Kafka "
                "version, 3.9.1 on our broker)", "metavar": "VERSION"})
    acks: str = field(default="all", metadata={"help": "producer acks", "choices": ACKS})
    idempotence: bool = field(default=False, metadata={"help": "idempotent producers"})
    retries: int | None = field(default=None, metadata={
        "help": "producer retries (default 0, or unbounded with --idempotence)"})
    linger_ms: int = field(default=0, metadata={"help": "producer linger.ms"})
    keys: int = field(default=4, metadata={"help": "keys = partitions"})
    concurrency: int = field(default=6, metadata={"help": "client threads"})
    rate: float = field(default=100.0, metadata={"help": "ops per second over all clients"})
    op_timeout: float = field(default=5.0, metadata={"help": "per-op timeout",
                                                     "metavar": "SECONDS"})
    sub_via: str = field(default="assign", metadata={
        "help": "consumers assign keys, or subscribe in consumer groups", "choices": SUB_VIA})
    groups: int = field(default=1, metadata={
        "help": "consumer groups in subscribe mode (threads spread over g0..gN-1)"})
    commit: str = field(default="after-process", metadata={
        "help": "subscribe mode's offset commits: auto (enable.auto.commit), after-process "
                "(commit op after each poll: at-least-once), before-process (commit inside "
                "the poll, before processing: at-most-once)", "choices": COMMIT_MODES})
    group_protocol: str = field(default="classic", metadata={
        "help": "subscribe mode's group protocol: classic (JoinGroup/SyncGroup) or consumer "
                "(KIP-848, Kafka 4.x; java and confluent clients)",
        "choices": GROUP_PROTOCOLS})
    session_timeout_ms: int = field(default=6000, metadata={
        "help": "consumer group session timeout in subscribe mode", "metavar": "MS"})
    txn: bool = field(default=False, metadata={
        "help": "sends and polls as txn ops, each one Kafka transaction (confluent or java "
                "client, assign mode, acks=all; the producers are idempotent)"})
    isolation_level: str = field(default="read_committed", metadata={
        "help": "the consumers' isolation.level", "choices": ISOLATION_LEVELS})
    abort_rate: float = field(default=0.0, metadata={
        "help": "fraction of transactions aborted on purpose, 0 to 1 (queue: its txn ops, "
                "with --txn; transfer: its transfers)",
        "metavar": "R"})
    bootstrap_servers: tuple[str, ...] = ()
    java_runtime: JavaRuntime | None = None  # the compiled Java client, set by the harness
    topic: str = "kchaos"
    replication_factor: int = 3
    poll_timeout: float = 0.5
    # Several micro-ops in one send op are not atomic (one flush, several partitions),
    # while the queue checker counts an info op as committed when any of its values
    # was read: under faults keep 1, or partial info sends show up as unseen.
    max_sends_per_op: int = 1
    max_txn_ops: int = 4
    send_weight: float = 0.5
    poll_weight: float = 0.45
    assign_weight: float = 0.05
    crash_weight: float = 0.0
    seed: int = 0
    drain_idle_polls: int = 10

    def __post_init__(self) -> None:
        if self.client not in CLIENTS and self.client != "kafka_python":
            raise ValueError(f"unknown client {self.client!r}; known: {', '.join(CLIENTS)}")
        if self.java_client_version is not None and self.client != "java":
            raise ValueError(f"--java-client-version {self.java_client_version} is for the "
                             f"Java client, not {self.client}: add --client java or drop it")
        if str(self.acks) not in ACKS:
            raise ValueError(f"acks must be one of {', '.join(ACKS)}, got {self.acks!r}")
        if self.keys < 1:
            raise ValueError(f"keys must be >= 1, got {self.keys}")
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {self.concurrency}")
        if self.retries is not None and self.retries < 0:
            raise ValueError(f"retries must be >= 0, got {self.retries}")
        if self.linger_ms < 0:
            raise ValueError(f"linger_ms must be >= 0, got {self.linger_ms}")
        if self.rate <= 0:
            raise ValueError(f"rate must be > 0, got {self.rate:g}")
        if self.op_timeout <= 0:
            raise ValueError(f"op_timeout must be > 0 seconds, got {self.op_timeout:g}")
        self._validate_groups()
        self._validate_txn()

    def _validate_groups(self) -> None:
        if self.sub_via not in SUB_VIA:
            raise ValueError(f"sub_via {self.sub_via!r} is not one of {', '.join(SUB_VIA)}: "
                             "use assign (no group) or subscribe (consumer groups)")
        if self.commit not in COMMIT_MODES:
            raise ValueError(f"commit {self.commit!r} is not one of {', '.join(COMMIT_MODES)}")
        if self.groups < 1:
            raise ValueError(f"groups must be >= 1, got {self.groups}: set groups to the "
                             "number of consumer groups (1 or more)")
        if self.session_timeout_ms < MIN_SESSION_TIMEOUT_MS:
            raise ValueError(f"session_timeout_ms must be >= {MIN_SESSION_TIMEOUT_MS}, got "
                             f"{self.session_timeout_ms}: brokers reject shorter sessions "
                             "(group.min.session.timeout.ms)")
        if self.group_protocol not in GROUP_PROTOCOLS:
            raise ValueError(f"group_protocol {self.group_protocol!r} is not one of "
                             f"{', '.join(GROUP_PROTOCOLS)}")
        if self.group_protocol == "consumer":
            if not self.subscribe:
                raise ValueError("--group-protocol consumer is for consumer groups: add "
                                 "--sub-via subscribe")
            if self.client not in KIP848_CLIENTS:
                raise ValueError(f"--group-protocol consumer: {self.client} has no client of "
                                 f"the KIP-848 protocol; use --client "
                                 f"{' or --client '.join(KIP848_CLIENTS)}")
        if self.sub_via == "subscribe" and self.groups > self.concurrency:
            raise ValueError(f"groups ({self.groups}) exceeds concurrency ({self.concurrency}): "
                             "every group needs a consumer thread; lower groups or raise "
                             "concurrency")

    def _validate_txn(self) -> None:
        if self.isolation_level not in ISOLATION_LEVELS:
            raise ValueError(f"isolation_level {self.isolation_level!r} is not one of "
                             f"{', '.join(ISOLATION_LEVELS)}")
        if not 0 <= self.abort_rate <= 1:
            raise ValueError(f"abort_rate must be between 0 and 1, got {self.abort_rate:g}: "
                             "it is the fraction of txn ops aborted on purpose")
        if self.abort_rate > 0 and not self.txn:
            raise ValueError("abort_rate needs txn: only txn ops can be aborted; add --txn "
                             "or drop --abort-rate")
        if not self.txn:
            return
        if self.client not in TXN_CLIENTS:
            raise ValueError(f"txn needs a client of transactions ({', '.join(TXN_CLIENTS)}), "
                             f"got {self.client!r}: set --client confluent or --client java")
        if self.subscribe:
            raise ValueError("txn runs in assign mode: drop --sub-via subscribe (consumer "
                             "groups with transactions are the transfer workload)")
        if str(self.acks) != "all":
            raise ValueError(f"txn needs acks=all (transactional producers are idempotent), "
                             f"got acks={self.acks}: set --acks all")

    @property
    def subscribe(self) -> bool:
        return self.sub_via == "subscribe"

    @property
    def idempotent(self) -> bool:
        """Whether the producers are idempotent (transactional ones always are)."""
        return self.idempotence or self.txn

    def key_partitions(self) -> dict[int, int]:
        return {key: key for key in range(self.keys)}

    def client_options(self) -> ClientOptions:
        retries = self.retries if self.retries is not None else (
            1_000_000 if self.idempotent else 0)
        return ClientOptions(
            bootstrap_servers=tuple(self.bootstrap_servers), topic=self.topic,
            key_partitions=self.key_partitions(), replication_factor=self.replication_factor,
            acks=str(self.acks), retries=retries, idempotence=self.idempotent,
            linger_ms=self.linger_ms, op_timeout=self.op_timeout,
            poll_timeout=self.poll_timeout, sub_via=self.sub_via, commit=self.commit,
            session_timeout_ms=self.session_timeout_ms, isolation_level=self.isolation_level,
            transactional=self.txn, transactional_id=f"{self.topic}-txn",
            concurrency=self.concurrency, java=self.java_runtime,
            group_protocol=self.group_protocol)

    def test_fields(self) -> dict[str, Any]:
        """What test.json records of these options (the checkers read them)."""
        fields = {"acks": self.acks, "idempotence": self.idempotent,
                  "subscribe": self.subscribe, "client": self.client, "txn": self.txn,
                  "isolation_level": self.isolation_level, "abort_rate": self.abort_rate}
        if self.subscribe:
            fields.update(sub_via=self.sub_via, commit=self.commit, groups=self.groups,
                          session_timeout_ms=self.session_timeout_ms,
                          group_protocol=self.group_protocol)
        if self.txn:
            fields["transactional_ids"] = list(self.client_options().transactional_ids())
        if self.java_runtime is not None:
            fields["java_client_version"] = self.java_runtime.version
        return fields


def checkers(options: QueueOptions) -> tuple[str, ...]:
    """The checkers the workload needs with `options`: subscribe mode adds `groups`,
    transactions add `txn`."""
    if options.txn:
        return TXN_CHECKERS
    return GROUP_CHECKERS if options.subscribe else CHECKERS


def client_factory(name: str, options: ClientOptions) -> Client:
    """The unopened client of adapter `name` ("confluent", "kafka-python" or "java", which
    needs the compiled client in `options.java`)."""
    if name == "java":
        from workloads.kafka.java.client import JavaClient
        return JavaClient(options)
    if name == "confluent":
        from workloads.kafka.confluent import ConfluentClient
        return ConfluentClient(options)
    if name in ("kafka-python", "kafka_python"):
        from workloads.kafka.kafka_python import KafkaPythonClient
        return KafkaPythonClient(options)
    raise ValueError(f"unknown client {name!r}; known: {', '.join(CLIENTS)}")


@dataclass(frozen=True)
class SendGenerator:
    """Send ops of 1..`most` micro-ops to random keys, values 0, 1, 2, ... in order."""

    keys: int
    most: int
    seed: int
    next_value: int = 0

    def op(self, test: Any, ctx: gen.Context) -> tuple[dict, Any] | Any:
        rng = random.Random(self.seed)
        count = rng.randint(1, self.most)
        micro = [["send", rng.randrange(self.keys), self.next_value + i] for i in range(count)]
        filled = gen.fill_in({"f": "send", "value": micro}, ctx)
        if filled is gen.PENDING:
            return gen.PENDING
        return filled, replace(self, seed=rng.getrandbits(63), next_value=self.next_value + count)

    def update(self, test: Any, ctx: gen.Context, event: Mapping[str, Any]) -> SendGenerator:
        return self


@dataclass(frozen=True)
class TxnGenerator:
    """Txn ops of 1..`most` micro-ops, each a send (with probability `send_share`, values
    0, 1, 2, ... in order) or a poll; a fraction `abort_rate` marked `"abort": true`."""

    keys: int
    most: int
    seed: int
    send_share: float = 0.5
    abort_rate: float = 0.0
    next_value: int = 0

    def op(self, test: Any, ctx: gen.Context) -> tuple[dict, Any] | Any:
        rng = random.Random(self.seed)
        micro: list[list[Any]] = []
        value = self.next_value
        for _ in range(rng.randint(1, self.most)):
            if rng.random() < self.send_share:
                micro.append(["send", rng.randrange(self.keys), value])
                value += 1
            else:
                micro.append(["poll"])
        item: dict[str, Any] = {"f": "txn", "value": micro}
        if rng.random() < self.abort_rate:
            item["abort"] = True
        filled = gen.fill_in(item, ctx)
        if filled is gen.PENDING:
            return gen.PENDING
        return filled, replace(self, seed=rng.getrandbits(63), next_value=value)

    def update(self, test: Any, ctx: gen.Context, event: Mapping[str, Any]) -> TxnGenerator:
        return self


def _poll(test: Any, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "poll", "value": [["poll"]]}


def _crash(test: Any, ctx: gen.Context) -> dict[str, Any]:
    return {"f": "crash", "value": None}


@dataclass(frozen=True)
class AssignGenerator:
    """Assign ops: a random non-empty subset of keys; half of them seek to the beginning."""

    keys: int
    seed: int

    def op(self, test: Any, ctx: gen.Context) -> tuple[dict, Any] | Any:
        rng = random.Random(self.seed)
        chosen = sorted(rng.sample(range(self.keys), rng.randint(1, self.keys)))
        filled = gen.fill_in({"f": "assign", "value": chosen,
                              "seek_to_beginning": rng.random() < 0.5}, ctx)
        if filled is gen.PENDING:
            return gen.PENDING
        return filled, replace(self, seed=rng.getrandbits(63))

    def update(self, test: Any, ctx: gen.Context, event: Mapping[str, Any]) -> AssignGenerator:
        return self


def queue_workload(options: QueueOptions,
                   factory: Callable[[str, ClientOptions], Client] = client_factory) -> Workload:
    """The queue workload for `options`."""
    seeds = random.Random(options.seed)
    send = SendGenerator(options.keys, options.max_sends_per_op, seeds.getrandbits(63))
    assign = AssignGenerator(options.keys, seeds.getrandbits(63))
    if options.subscribe:
        sources = [(options.send_weight, send), (options.poll_weight, _poll),
                   (options.crash_weight, group_ops.GroupCrash(assign.seed))]
    elif options.txn:
        share = options.send_weight / (options.send_weight + options.poll_weight)
        txns = TxnGenerator(options.keys, options.max_txn_ops, send.seed, share,
                            options.abort_rate)
        sources = [(options.send_weight + options.poll_weight, txns),
                   (options.assign_weight, assign), (options.crash_weight, _crash)]
    else:
        sources = [(options.send_weight, send), (options.poll_weight, _poll),
                   (options.assign_weight, assign), (options.crash_weight, _crash)]
    chosen = [(weight, source) for weight, source in sources if weight > 0]
    ops = gen.mix([s for _, s in chosen], seeds.getrandbits(63), [w for w, _ in chosen])
    generator = gen.stagger(1.0 / options.rate, ops, seeds.getrandbits(63))
    keys = list(range(options.keys))
    if options.subscribe:
        generator = group_ops.GroupOps(generator, options.groups, options.commit)
        final_generator = group_ops.final_generator(keys, options.groups, options.commit,
                                                    options.drain_idle_polls,
                                                    options.session_timeout_ms)
    else:
        idle_polls = options.drain_idle_polls
        if options.txn:
            idle_polls = drain_idle_polls(options.op_timeout, options.poll_timeout, idle_polls)
        final_generator = final.drain(keys, idle_polls, end_offsets=True)
    client_options = options.client_options()
    client = factory(options.client, client_options)
    return Workload(
        client=client,
        generator=generator,
        final_generator=final_generator,
        key_partitions={key: (options.topic, key) for key in keys},
        concurrency=options.concurrency,
        test_fields=options.test_fields(),
        op_timeout=options.op_timeout,
        topic=options.topic,
        group_ids=tuple(group_ops.group_names(options.groups)) if options.subscribe else (),
        children=getattr(client, "children", None),
        txn_ids=client_options.transactional_ids(),
        stalls=getattr(client, "zombies", None) if options.txn else None,
    )


def build(options: QueueOptions, context: WorkloadContext) -> Workload:
    """The queue workload against a running db."""
    return queue_workload(replace(options, bootstrap_servers=context.bootstrap_servers,
                                  replication_factor=min(3, context.brokers),
                                  seed=context.seed))


KIND = WorkloadKind(QueueOptions, build, CHECKERS, checkers)
