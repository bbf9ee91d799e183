"""Consumer-group faults: what a workload's consumers offer to nemeses, zombie members, and
partitions added under a running group.

A workload whose consumers are local child processes of the harness declares
`ConsumerTargets` (`consumer_pids()`, `groups()`, `transactional_ids()`, `topic`); the
harness hands the built workload to the package (`Consumers.attach`), which every nemesis
of the package shares. The coordinator faults act on the coordinator of one of its
groups or transactional ids (`coordinated`). Until then, or when the workload declares
nothing, the faults below and the coordinator faults are logged no-ops: an info op whose
value is `{"skipped": reason}`.

`start-pause-consumers` SIGSTOPs consumer processes ("one", or "some": a random non-empty
subset) and `stop-pause-consumers` SIGCONTs them, never earlier than the group session
timeout plus `PAUSE_MARGIN` after the pause (the package schedules it no earlier, too): the
paused members become zombies the coordinator expels.
`add-partitions` grows the workload's topic by 1 or 2 partitions (CreatePartitions through
confluent-kafka's AdminClient), at most `MAX_ADDITIONS` times a run.
`stall-producer` makes a zombie producer, as a long GC pause does: the next transaction
with sends about to commit (all acknowledged) stalls for the op's value in seconds; its
process goes on with a new producer of the same transactional id, whose InitProducerId
must fence the stalled one, which then wakes and commits (`workloads.kafka.transactions`).
It completes `{"stalled": transactional id, "seconds": s}`, or "no-target" when no
transaction came to commit within `STALL_WITHIN` seconds (a workload whose producers are
not transactional, or whose transactions run in child processes, gives it nothing to
stall: skipped).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable
from typing import Protocol, runtime_checkable

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions

from nemesis.base import BaseNemesis, completed, no_target, skipped
from nemesis.capabilities import Nodes

__all__ = [
    "DEFAULT_SESSION_TIMEOUT",
    "MAX_ADDITIONS",
    "NO_COORDINATED",
    "NO_GROUPS",
    "PAUSE_MARGIN",
    "AddPartitionsNemesis",
    "ConsumerTargets",
    "Consumers",
    "PauseConsumersNemesis",
    "ProducerStalls",
    "StallProducerNemesis",
    "StallableProducers",
    "create_partitions",
]

DEFAULT_SESSION_TIMEOUT = 6.0
PAUSE_MARGIN = 2.0
MAX_ADDITIONS = 3
STALL_WITHIN = 10.0
ADMIN_TIMEOUT = 15.0
NO_GROUPS = "the workload has no consumer groups"
NO_COORDINATED = "the workload has no consumer groups or transactional ids"
NO_PROCESSES = "the workload has no consumer processes (assign mode)"
NO_TOPIC = "the workload declares no topic"
NO_STALLS = "the workload has no transactional producers in this process to stall"


@runtime_checkable
class ConsumerTargets(Protocol):
    """What a workload offers to consumer-group faults."""

    topic: str

    def consumer_pids(self) -> list[int]:
        """The local pids of its consumer processes now (empty in assign mode)."""

    def groups(self) -> list[str]:
        """The consumer group ids of the run."""

    def transactional_ids(self) -> list[str]:
        """The transactional ids of the run's producers."""


class ProducerStalls(Protocol):
    """Where a workload's transactional producers take stalls."""

    def stall_next(self, seconds: float, within: float) -> str | None:
        """Stall the next committing transaction for `seconds`; its transactional id, or
        None when none came to commit within `within` seconds."""


@runtime_checkable
class StallableProducers(Protocol):
    """What a workload offers to the `stall-producer` fault: where its producers in this
    process take stalls (None: it has none, e.g. its transactions run in children)."""

    @property
    def stalls(self) -> ProducerStalls | None: ...


class Consumers:
    """The run's consumer targets, shared by a package's nemeses: none until `attach`."""

    def __init__(self, session_timeout: float = DEFAULT_SESSION_TIMEOUT) -> None:
        self.session_timeout = session_timeout
        self.targets: ConsumerTargets | None = None

    def attach(self, workload: object) -> None:
        """Take `workload`'s consumers if it declares `ConsumerTargets`, else none."""
        self.targets = workload if isinstance(workload, ConsumerTargets) else None

    def pids(self) -> list[int]:
        return list(self.targets.consumer_pids()) if self.targets is not None else []

    def groups(self) -> list[str]:
        return list(self.targets.groups()) if self.targets is not None else []

    def coordinated(self) -> list[tuple[str, str]]:
        """(kind, key) of every group ("group") and transactional id ("transaction")."""
        if self.targets is None:
            return []
        return ([("group", g) for g in self.targets.groups()]
                + [("transaction", t) for t in self.targets.transactional_ids()])

    def stalls(self) -> ProducerStalls | None:
        """Where the workload's transactional producers in this process take stalls, if
        it has any."""
        targets = self.targets
        if not isinstance(targets, StallableProducers) or not targets.transactional_ids():
            return None
        return targets.stalls

    @property
    def topic(self) -> str | None:
        return self.targets.topic if self.targets is not None else None


def _signal(pid: int, sig: signal.Signals) -> bool:
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


class PauseConsumersNemesis(BaseNemesis):
    """`start-pause-consumers` (SIGSTOP "one" or "some" consumer processes) and
    `stop-pause-consumers` (SIGCONT them once the session timeout + 2 s has passed)."""

    fs = frozenset({"start-pause-consumers", "stop-pause-consumers"})

    def __init__(self, consumers: Consumers, rng: random.Random) -> None:
        self.consumers = consumers
        self.rng = rng
        self.paused: list[int] = []
        self.until = 0.0  # time.monotonic() before which the paused stay paused

    @property
    def hold(self) -> float:
        return self.consumers.session_timeout + PAUSE_MARGIN

    def teardown(self, cluster: Nodes) -> None:
        self._resume()

    def invoke(self, cluster: Nodes, op: dict) -> dict:
        if op["f"] == "stop-pause-consumers":
            if not self.paused:
                return completed(op, "not-started")
            time.sleep(max(0.0, self.until - time.monotonic()))
            return completed(op, {"resumed": self._resume()})
        pids = sorted(set(self.consumers.pids()) - set(self.paused))
        if not pids:
            return skipped(op, NO_PROCESSES)
        chosen = self._choose(pids, op.get("value") or "one")
        stopped = [pid for pid in chosen if _signal(pid, signal.SIGSTOP)]
        self.paused += stopped
        self.until = time.monotonic() + self.hold
        return completed(op, {"paused": stopped, "seconds": self.hold})

    def _choose(self, pids: list[int], spec: str) -> list[int]:
        if spec == "one":
            return [self.rng.choice(pids)]
        if spec == "some":
            return sorted(self.rng.sample(pids, self.rng.randint(1, len(pids))))
        raise ValueError(f"unknown consumer target {spec!r}: one or some")

    def _resume(self) -> list[int]:
        resumed = [pid for pid in self.paused if _signal(pid, signal.SIGCONT)]
        self.paused = []
        return resumed


class StallProducerNemesis(BaseNemesis):
    """`stall-producer` with value the stall in seconds: see the module docstring."""

    fs = frozenset({"stall-producer"})

    def __init__(self, consumers: Consumers, within: float = STALL_WITHIN) -> None:
        self.consumers = consumers
        self.within = within

    def invoke(self, cluster: Nodes, op: dict) -> dict:
        producers = self.consumers.stalls()
        if producers is None:
            return skipped(op, NO_STALLS)
        seconds = float(op.get("value") or 0)
        if seconds <= 0:
            raise ValueError(f"stall-producer needs a stall in seconds > 0, not "
                             f"{op.get('value')!r}")
        stalled = producers.stall_next(seconds, self.within)
        if stalled is None:
            return no_target(op)
        return completed(op, {"stalled": stalled, "seconds": seconds})


STALE_METADATA = frozenset({KafkaError.LEADER_NOT_AVAILABLE, KafkaError.UNKNOWN_TOPIC_OR_PART})


def create_partitions(bootstrap_servers: str, topic: str, more: int,
                      within: float = ADMIN_TIMEOUT) -> tuple[int, int]:
    """Grow `topic` by `more` partitions (CreatePartitions); (count before, count after).
    The count comes from a broker's metadata, which may lag the controller: a topic just
    created may not be known there yet (LEADER_NOT_AVAILABLE, UNKNOWN_TOPIC_OR_PART), and
    a growth already made shows as INVALID_PARTITIONS. Both are read again for `within`
    seconds, then raised."""
    admin = AdminClient({"bootstrap.servers": bootstrap_servers})
    deadline = time.monotonic() + within
    while True:
        metadata = admin.list_topics(topic, timeout=ADMIN_TIMEOUT).topics[topic]
        if metadata.error is not None:
            if metadata.error.code() not in STALE_METADATA or time.monotonic() >= deadline:
                raise RuntimeError(f"topic {topic!r}: {metadata.error}")
            time.sleep(0.5)
            continue
        before = len(metadata.partitions)
        futures = admin.create_partitions([NewPartitions(topic, before + more)],
                                          operation_timeout=ADMIN_TIMEOUT)
        try:
            futures[topic].result(timeout=ADMIN_TIMEOUT)
        except KafkaException as error:
            stale = error.args[0].code() == KafkaError.INVALID_PARTITIONS
            if not stale or time.monotonic() >= deadline:
                raise
            time.sleep(1.0)
            continue
        return before, before + more


class AddPartitionsNemesis(BaseNemesis):
    """`add-partitions` with value 1 or 2: that many more partitions of the workload's
    topic, at most `MAX_ADDITIONS` times a run (then a logged no-op)."""

    fs = frozenset({"add-partitions"})

    def __init__(self, consumers: Consumers,
                 grow: Callable[[str, str, int], tuple[int, int]] = create_partitions) -> None:
        self.consumers = consumers
        self.grow = grow
        self.additions = 0

    def invoke(self, cluster: Nodes, op: dict) -> dict:
        topic = self.consumers.topic
        if not topic:
            return skipped(op, NO_TOPIC)
        if self.additions >= MAX_ADDITIONS:
            return skipped(op, f"partitions were added {MAX_ADDITIONS} times already")
        self.additions += 1
        before, after = self.grow(cluster.bootstrap_servers, topic, int(op.get("value") or 1))
        return completed(op, {"topic": topic, "partitions": [before, after]})
