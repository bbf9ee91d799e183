"""The queue workload, as Jepsen's Kafka workload in assign mode.

Keys 0..n-1 map onto partitions of one topic ("kchaos"; key k -> partition k), created
with the test's replication factor. Ops (DESIGN.md, "History"): `send` of one or a few
micro-ops `["send", k, v]` with unique integer values, `poll` (`[["poll"]]`), `assign`
(a random non-empty set of keys, seeking to the beginning or resuming) and, when asked
for, `crash` (the client is closed and reopened as a new process). The generator is
pure and seeded; the final generator drains every key from the beginning.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from workloads import final
from workloads import generator as gen
from workloads.client import Client, ClientOptions

__all__ = ["CLIENTS", "QueueOptions", "SendGenerator", "Workload", "client_factory",
           "queue_workload"]

CLIENTS = ("confluent", "kafka-python")


@dataclass(frozen=True, kw_only=True)
class QueueOptions:
    """Every knob of the queue workload; `rate` is ops per second over all clients."""

    bootstrap_servers: tuple[str, ...]
    client: str = "confluent"
    keys: int = 4
    concurrency: int = 4
    rate: float = 50.0
    topic: str = "kchaos"
    replication_factor: int = 3
    acks: str = "all"
    retries: int | None = None
    idempotence: bool = False
    linger_ms: int = 0
    op_timeout: float = 5.0
    poll_timeout: float = 0.5
    # Several micro-ops in one send op are not atomic (one flush, several partitions),
    # while the queue checker counts an info op as committed when any of its values
    # was read: under faults keep 1, or partial info sends show up as unseen.
    max_sends_per_op: int = 1
    send_weight: float = 0.5
    poll_weight: float = 0.45
    assign_weight: float = 0.05
    crash_weight: float = 0.0
    seed: int = 0
    drain_idle_polls: int = 10

    def key_partitions(self) -> dict[int, int]:
        return {key: key for key in range(self.keys)}

    def client_options(self) -> ClientOptions:
        retries = self.retries if self.retries is not None else (
            1_000_000 if self.idempotence else 0)
        return ClientOptions(
            bootstrap_servers=tuple(self.bootstrap_servers), topic=self.topic,
            key_partitions=self.key_partitions(), replication_factor=self.replication_factor,
            acks=str(self.acks), retries=retries, idempotence=self.idempotence,
            linger_ms=self.linger_ms, op_timeout=self.op_timeout,
            poll_timeout=self.poll_timeout)


@dataclass(frozen=True)
class Workload:
    """What the runner needs: a client factory value (open it per process), the client
    generator, the final generator (drain), and each key's (topic, partition)."""

    client: Client
    generator: Any
    final_generator: Any
    key_partitions: Mapping[Any, tuple[str, int]]
    concurrency: int
    test_fields: Mapping[str, Any] = field(default_factory=dict)


def client_factory(name: str, options: ClientOptions) -> Client:
    """The unopened client of adapter `name` ("confluent" or "kafka-python")."""
    if name == "confluent":
        from workloads.kafka_confluent import ConfluentClient
        return ConfluentClient(options)
    if name in ("kafka-python", "kafka_python"):
        from workloads.kafka_python import KafkaPythonClient
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
    if options.keys < 1 or options.concurrency < 1 or options.rate <= 0:
        raise ValueError("keys, concurrency and rate must be positive")
    seeds = random.Random(options.seed)
    sources = [
        (options.send_weight, SendGenerator(options.keys, options.max_sends_per_op,
                                            seeds.getrandbits(63))),
        (options.poll_weight, _poll),
        (options.assign_weight, AssignGenerator(options.keys, seeds.getrandbits(63))),
        (options.crash_weight, _crash),
    ]
    chosen = [(weight, source) for weight, source in sources if weight > 0]
    ops = gen.mix([s for _, s in chosen], seeds.getrandbits(63), [w for w, _ in chosen])
    generator = gen.stagger(1.0 / options.rate, ops, seeds.getrandbits(63))
    keys = list(range(options.keys))
    return Workload(
        client=factory(options.client, options.client_options()),
        generator=generator,
        final_generator=final.drain(keys, options.drain_idle_polls),
        key_partitions={key: (options.topic, key) for key in keys},
        concurrency=options.concurrency,
        test_fields={"acks": options.acks, "idempotence": options.idempotence,
                     "subscribe": False, "client": options.client},
    )
