"""Nemesis packages: faults by name, composed into one nemesis with a seeded schedule and a
final "heal everything", as Jepsen's `combined.clj`.

`package(["partition-one", "kill-controller"], seed=7, time_limit=60)` gives a `Package`:
`nemesis` (the composed faults plus `heal`), `generator` (the schedule, a `Staggered`:
in rounds that take each asked fault or group once in a random order, wait `interval`
seconds on average, start the fault, then stop it; as Jepsen's stagger, each wait runs
from the previous op's completion and each hold from its start's completion, so a slow op
delays what follows instead of bunching it, and nothing starts after the time limit),
`final_generator` (every stop op, then `heal`: all links open, every process resumed and
running), `perf` (for plots: each fault's start and stop fs) and `note` (how the schedule
was shortened: its first round's waits and holds always end within 90% of the time limit,
so every asked fault or group starts once unless its ops take the rest; faults whose
minimum holds alone do not fit are refused). Nemesis ops are
`{"type": "info", "process": "nemesis", "f", "value", "fault"}`, `fault` the name asked.

Consumer-group faults (`kill-coordinator`, `isolate-coordinator`, `depose-coordinator`,
`pause-consumers`, `add-partitions`) and `stall-producer` act on the run's clients, which
the harness hands over once the workload is built: `package.consumers.attach(workload)`
(see `nemesis.consumers`).

Targeted faults (`nemesis.targeted`: `shrink-isr-kill-leader`, `shrink-isr-isolate-leader`,
`kill-new-leader`, `strand-follower`, `depose-coordinator`) wait inside their op for the
cluster to react. Each fault names what it needs of the db (`Fault.needs`, protocols of
`nemesis.capabilities`): `check_applicable` refuses, before the run, a fault the db's
`Offer` lacks (`crash-lose-unflushed` needs brokers that lose their unflushed data,
`crash-vm` machines), and the `all` group leaves out the faults that need such extras.
A group stands for those of its faults the db can serve (`package(..., offer=...)`):
`partition` on a KRaft cluster leaves out `isolate-zookeeper`, `all` on ZooKeeper leaves
out the quorum faults (`partition-quorum`, `fence-broker`, `kill-quorum-majority`).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from nemesis.base import BaseNemesis, Nemesis, completed
from nemesis.capabilities import (
    ClockControl,
    CutsClients,
    HasController,
    HasCoordinator,
    HasDedicatedQuorum,
    HasLeaders,
    HasQuorum,
    HasZooKeeper,
    Killable,
    LosesUnflushed,
    Nodes,
    Offer,
    PartitionableNetwork,
    Pausable,
    SeparateMetadataStore,
    VMControl,
    dedicated_controllers,
    refusal,
    zookeepers,
)
from nemesis.clock import ClockNemesis, reset_clocks
from nemesis.consumers import (
    DEFAULT_SESSION_TIMEOUT,
    PAUSE_MARGIN,
    AddPartitionsNemesis,
    Consumers,
    PauseConsumersNemesis,
    StallProducerNemesis,
)
from nemesis.partition import Firewall, PacketLossNemesis, PartitionNemesis
from nemesis.power_loss import CrashLoseUnflushedNemesis
from nemesis.process import (
    ExpireSessionNemesis,
    KillNemesis,
    PauseNemesis,
    PauseZooKeeperNemesis,
    RestartNemesis,
)
from nemesis.targeted import TargetedNemesis
from nemesis.vm import VMNemesis

__all__ = [
    "BROKER_SESSION_TIMEOUT",
    "FAULTS",
    "GROUPS",
    "Composed",
    "Fault",
    "HealNemesis",
    "NemesisOptions",
    "Package",
    "Schedule",
    "Staggered",
    "Step",
    "asked",
    "check_applicable",
    "compose",
    "expand",
    "noop",
    "fit_round",
    "package",
    "schedule_need",
    "schedule_note",
    "schedule_steps",
]


NemesisKind = Callable[[Firewall, random.Random, Consumers], Nemesis]


def _partition(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return PartitionNemesis(firewall, rng, consumers)


def _packet_loss(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return PacketLossNemesis(firewall)


def _kill(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return KillNemesis(rng, consumers)


def _restart(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return RestartNemesis(rng)


def _pause(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return PauseNemesis(rng)


def _pause_zookeeper(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return PauseZooKeeperNemesis(rng)


def _expire_session(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return ExpireSessionNemesis(firewall, rng)


def _pause_consumers(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return PauseConsumersNemesis(consumers, rng)


def _add_partitions(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return AddPartitionsNemesis(consumers)


def _stall_producer(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return StallProducerNemesis(consumers)


def _targeted(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return TargetedNemesis(firewall, rng, consumers=consumers)


def _crash_lose_unflushed(firewall: Firewall, rng: random.Random,
                          consumers: Consumers) -> Nemesis:
    return CrashLoseUnflushedNemesis(rng)


def _vm(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return VMNemesis(rng)


def _clock(firewall: Firewall, rng: random.Random, consumers: Consumers) -> Nemesis:
    return ClockNemesis(rng)


@dataclass(frozen=True)
class Fault:
    """A named fault: the nemesis that does it (`kind` builds it; faults of one kind share
    one), the op that starts it (with one of `values`), the f that ends it, and the
    capabilities it needs of the db."""

    kind: NemesisKind
    start: str
    values: tuple[Any, ...]
    stop: str | None = None
    needs: tuple[type, ...] = ()


# The share of the time limit the first round of a schedule may take: every asked fault
# has started, and most have ended, before the last tenth of the run.
ROUND_SHARE = 0.9
# Capabilities a db may well lack whichever faults it serves: `all` leaves out their faults.
EXTRAS = frozenset({LosesUnflushed, VMControl, CutsClients, ClockControl})
# Kafka's default broker.session.timeout.ms (seconds), and how much longer `fence-broker`
# holds its cut than the session, so that the controller fences the broker.
BROKER_SESSION_TIMEOUT = 9.0
FENCE_MARGIN = 3.0

_PARTITION = {"partition-one": "one", "partition-halves": "halves",
              "partition-one-way": "one-way", "partition-ring": "ring",
              "partition-bridge": "bridge", "isolate-controller": "controller",
              "isolate-zookeeper": "zookeeper", "leader-from-followers": "leader-from-followers",
              "isolate-coordinator": "coordinator", "isolate-clients": "clients"}
# What a partition shape needs beyond a network to cut.
_SHAPE_NEEDS: dict[str, tuple[type, ...]] = {
    "controller": (HasController,), "zookeeper": (HasZooKeeper,),
    "leader-from-followers": (HasLeaders,), "coordinator": (HasCoordinator,),
    "clients": (CutsClients,)}
_TARGETED = (PartitionableNetwork, Killable, HasLeaders)
FAULTS: dict[str, Fault] = {
    **{name: Fault(_partition, "start-partition", (shape,), "stop-partition",
                   (PartitionableNetwork, *_SHAPE_NEEDS.get(shape, ())))
       for name, shape in _PARTITION.items()},
    "packet-loss": Fault(_packet_loss, "start-packet-loss", ({"probability": 0.2},),
                         "stop-packet-loss", (PartitionableNetwork,)),
    "kill": Fault(_kill, "kill", ("one",), "start", (Killable,)),
    "kill-controller": Fault(_kill, "kill", ("controller",), "start", (Killable, HasController)),
    "kill-leader": Fault(_kill, "kill", ("leader",), "start", (Killable, HasLeaders)),
    "kill-all": Fault(_kill, "kill", ("all",), "start", (Killable,)),
    "kill-coordinator": Fault(_kill, "kill", ("coordinator",), "start",
                              (Killable, HasCoordinator)),
    "restart": Fault(_restart, "restart", ("one", "controller", "leader"), None,
                     (Killable, HasController, HasLeaders)),
    "pause": Fault(_pause, "pause", ("one", "controller", "leader"), "resume",
                   (Pausable, HasController, HasLeaders)),
    "pause-zookeeper": Fault(_pause_zookeeper, "pause-zookeeper", ("leader", "majority"),
                             "resume-zookeeper", (Pausable, HasZooKeeper)),
    "expire-session": Fault(_expire_session, "expire-session", ("one", "controller"), None,
                            (PartitionableNetwork, HasZooKeeper, HasController)),
    "partition-quorum": Fault(_partition, "start-partition", ("quorum",), "stop-partition",
                              (PartitionableNetwork, HasQuorum)),
    "fence-broker": Fault(_partition, "start-partition", ("fence-broker",), "stop-partition",
                          (PartitionableNetwork, HasDedicatedQuorum)),
    "kill-quorum-majority": Fault(_kill, "kill", ("quorum-majority",), "start",
                                  (Killable, HasDedicatedQuorum)),
    "pause-consumers": Fault(_pause_consumers, "start-pause-consumers", ("one", "some"),
                             "stop-pause-consumers"),
    "add-partitions": Fault(_add_partitions, "add-partitions", (1, 2)),
    "stall-producer": Fault(_stall_producer, "stall-producer", (2.0, 5.0)),
    "isolate-leader": Fault(_partition, "start-partition", ("leader",), "stop-partition",
                            (PartitionableNetwork, HasLeaders)),
    "shrink-isr-kill-leader": Fault(_targeted, "shrink-isr", ("kill",), "heal-targeted",
                                    (*_TARGETED, SeparateMetadataStore)),
    "shrink-isr-isolate-leader": Fault(_targeted, "shrink-isr", ("isolate",),
                                       "heal-targeted", (*_TARGETED, SeparateMetadataStore)),
    "kill-new-leader": Fault(_targeted, "kill-new-leader", ("leader",), "heal-targeted",
                             _TARGETED),
    "strand-follower": Fault(_targeted, "strand-follower", ("leader",), "heal-targeted",
                             _TARGETED),
    "depose-coordinator": Fault(_targeted, "depose-coordinator", ("coordinator",),
                                "heal-targeted", (*_TARGETED, HasCoordinator)),
    "crash-lose-unflushed": Fault(_crash_lose_unflushed, "crash-lose-unflushed",
                                  ("one", "leader", "replicas"), "power-on",
                                  (Killable, HasLeaders, LosesUnflushed)),
    "crash-vm": Fault(_vm, "crash-vm", ("one", "broker", "zookeeper"), "start-vm",
                      (VMControl, Killable)),
    "pause-vm": Fault(_vm, "pause-vm", ("one", "broker", "zookeeper"), "resume-vm",
                      (VMControl,)),
    "clock-bump": Fault(_clock, "clock-bump",
                        ({"seconds": 600}, {"seconds": -600}, {"seconds": 7200}),
                        "clock-reset", (ClockControl,)),
    "clock-strobe": Fault(_clock, "clock-strobe",
                          ({"seconds": 30, "period_ms": 200, "duration": 3.0},),
                          "clock-reset", (ClockControl,)),
}
GROUPS: dict[str, tuple[str, ...]] = {
    "partition": tuple(_PARTITION),
    "targeted": ("shrink-isr-kill-leader", "shrink-isr-isolate-leader", "kill-new-leader",
                 "strand-follower", "depose-coordinator"),
    "quorum": ("partition-quorum", "fence-broker", "kill-quorum-majority"),
    "all": tuple(name for name, fault in FAULTS.items() if not EXTRAS & set(fault.needs)),
}


def check_applicable(names: Iterable[str], offer: Offer) -> None:
    """ValueError naming the fault, what it needs and what to do, for the first fault of
    `names` (expanded) that the db of `offer` cannot serve."""
    for name in names:
        refused = refusal(name, FAULTS[name].needs, offer)
        if refused is not None:
            raise ValueError(refused)


def asked(names: str | Iterable[str], offer: Offer | None = None) -> list[tuple[str, ...]]:
    """What `a,b,...` or a list asks for, one entry per fault or group named: its faults
    (a group's all, or with `offer` those the db can serve), order kept, a fault asked
    twice only in its first entry, "none" and empty entries dropped; ValueError naming an
    unknown name."""
    items = names.split(",") if isinstance(names, str) else list(names)
    seen: set[str] = set()
    result: list[tuple[str, ...]] = []
    for name in (item.strip() for item in items if item.strip()):
        if name in GROUPS:
            members = tuple(member for member in GROUPS[name] if offer is None
                            or refusal(member, FAULTS[member].needs, offer) is None)
        elif name in FAULTS:
            members = (name,)
        elif name == "none":
            continue
        else:
            known = ", ".join([*FAULTS, *GROUPS, "none"])
            raise ValueError(f"unknown nemesis {name!r}; known: {known}")
        fresh = tuple(member for member in members if member not in seen)
        seen.update(fresh)
        if fresh:
            result.append(fresh)
    return result


def expand(names: str | Iterable[str]) -> list[str]:
    """Fault names from `a,b,...` or a list, groups expanded, order kept, duplicates dropped."""
    return [name for item in asked(names) for name in item]


class HealNemesis(BaseNemesis):
    """`heal`: every firewall rule gone, every process continued, every process running,
    as far as the db lets faults do each."""

    fs = frozenset({"heal"})

    def __init__(self, firewall: Firewall) -> None:
        self.firewall = firewall

    def invoke(self, cluster: Nodes, op: dict) -> dict:
        if isinstance(cluster, PartitionableNetwork):
            self.firewall.heal(cluster)
        if isinstance(cluster, ClockControl):
            reset_clocks(cluster)
        started = []
        for service, nodes in (("zookeeper", zookeepers(cluster)),
                               ("controller", dedicated_controllers(cluster)),
                               ("broker", cluster.brokers)):
            for node in nodes:
                if isinstance(cluster, Pausable):
                    cluster.resume(node, service)
                if isinstance(cluster, Killable) and not cluster.running(node, service) \
                        and cluster.start(node, service):
                    started.append(f"{node}:{service}")
        return completed(op, {"healed": True, "started": started})


class Composed:
    """Routes each op to the one nemesis claiming its f."""

    def __init__(self, nemeses: Sequence[Nemesis]) -> None:
        claimed: dict[str, Nemesis] = {}
        for nemesis in nemeses:
            for f in nemesis.fs:
                if f in claimed:
                    raise ValueError(f"two nemeses claim f {f!r}: {claimed[f]!r}, {nemesis!r}")
                claimed[f] = nemesis
        self.nemeses = tuple(nemeses)
        self.routes = claimed
        self.fs = frozenset(claimed)

    def setup(self, cluster: Nodes) -> None:
        for nemesis in self.nemeses:
            nemesis.setup(cluster)

    def invoke(self, cluster: Nodes, op: dict) -> dict:
        if op["f"] not in self.routes:
            raise ValueError(f"no nemesis handles f {op['f']!r}; known: {sorted(self.fs)}")
        return self.routes[op["f"]].invoke(cluster, op)

    def teardown(self, cluster: Nodes) -> None:
        for nemesis in reversed(self.nemeses):
            nemesis.teardown(cluster)


def compose(nemeses: Sequence[Nemesis]) -> Composed:
    return Composed(nemeses)


@dataclass(frozen=True)
class Schedule:
    """A pure generator over ops at fixed times (a replayed or a scenario's schedule):
    `op(test, ctx)` returns `(op, next)` or None when done; the op's "time" (ns since the
    test started) is when to invoke it, never earlier than `ctx.time`."""

    ops: tuple[dict, ...]
    position: int = 0

    def op(self, test: Any, ctx: Any) -> tuple[dict, Schedule] | None:
        if self.position >= len(self.ops):
            return None
        op = dict(self.ops[self.position])
        now = _now(ctx)
        op["time"] = max(op.get("time") or 0, now)
        return op, Schedule(self.ops, self.position + 1)

    def update(self, test: Any, ctx: Any, event: dict) -> Schedule:
        return self

    def __iter__(self):
        return iter(self.ops[self.position:])


@dataclass(frozen=True)
class Staggered:
    """The package's schedule as a pure generator, after Jepsen's stagger: each fault of
    `steps` starts its wait after the previous op completed (the first after the test
    started), and stops its hold after its start completed, so a slow op (a targeted fault
    waits for the cluster, a stop restarts JVMs) delays what follows instead of making the
    overdue ops fire back to back; a step of a fitted first round starts at its planned
    time (`Step.at`) or, when the previous op completed later, then. Nothing starts at or
    after `time_limit` (ns since the
    test started): such a start is dropped with its stop, and the schedule ends; the stop of
    a started fault comes at the latest just before the time limit.

    It learns completions from `update`: the first nemesis event after an op is its
    invocation, the next its completion (at `ctx.time`). While an op runs, `op` offers the
    next op at the earliest time it can be due (the interpreter invokes nothing on a busy
    thread) or None when that is past the time limit."""

    steps: tuple[Step, ...]
    time_limit: int
    position: int = 0
    stopping: bool = False  # the next op stops steps[position]; else it starts it
    since: int = 0  # ns when the previous op completed
    stage: str = "ready"  # after an op: "invoked", then "running" until its completion

    def op(self, test: Any, ctx: Any) -> tuple[dict, Staggered] | None:
        if self.position >= len(self.steps):
            return None
        now = _now(ctx)
        since = self.since if self.stage == "ready" else now
        step = self.steps[self.position]
        fault = FAULTS[step.name]
        if self.stopping:
            due = min(since + _ns(step.hold or 0.0), self.time_limit - 1)
            op = _op(str(fault.stop), None, max(due, now), step.name)
            following = replace(self, position=self.position + 1, stopping=False)
        else:
            due = since + _ns(step.wait) if step.at is None else max(since, _ns(step.at))
            time = max(due, now)
            if time >= self.time_limit:
                return None
            op = _op(fault.start, step.value, time, step.name)
            following = (replace(self, stopping=True) if step.hold is not None
                         else replace(self, position=self.position + 1))
        return op, replace(following, stage="invoked")

    def update(self, test: Any, ctx: Any, event: dict) -> Staggered:
        if event.get("process") != "nemesis" or self.stage == "ready":
            return self
        if self.stage == "invoked":
            return replace(self, stage="running")
        now = _now(ctx)
        return replace(self, stage="ready", since=now)

    def __iter__(self):
        """The ops still to come, without times (those depend on when ops complete)."""
        for number, step in enumerate(self.steps[self.position:]):
            fault = FAULTS[step.name]
            if number or not self.stopping:
                yield _op(fault.start, step.value, fault=step.name)
            if fault.stop is not None and step.hold is not None:
                yield _op(fault.stop, fault=step.name)


def _now(ctx: Any) -> int:
    """A generator context's time, ns since the test started."""
    return getattr(ctx, "time", 0) if not isinstance(ctx, dict) else ctx.get("time", 0)


def _ns(seconds: float) -> int:
    return int(seconds * 1e9)


@dataclass(frozen=True)
class Package:
    nemesis: Composed
    generator: Staggered | Schedule
    final_generator: Schedule
    perf: tuple[dict, ...] = field(default=())
    faults: tuple[str, ...] = ()
    consumers: Consumers = field(default_factory=Consumers)
    note: str | None = None  # how the schedule was shortened to fit the time limit


def _op(f: str, value: Any = None, time: int | None = None, fault: str | None = None) -> dict:
    """A nemesis op; `fault` names the fault as the user asked for it (reports show it)."""
    op = {"type": "info", "process": "nemesis", "f": f, "value": value}
    if time is not None:
        op["time"] = time
    if fault is not None:
        op["fault"] = fault
    return op


def schedule_steps(faults: Sequence[str | Sequence[str]], seed: int, time_limit: float,
                   interval: float = 10.0, holds: Mapping[str, float] | None = None
                   ) -> tuple[Step, ...]:
    """Start a fault, stop it, repeat, in rounds: each round takes every entry of `faults`
    (a fault, or a group's faults, of which it picks one) once, in a random order. Each
    wait is uniform in [0, 2 * interval] seconds, a fault named in `holds` lasts at least
    that many seconds. The first round is shortened to fit (`fit_round`), so every entry
    starts once when its holds fit the time limit and its ops are quick; the steps end
    where their waits and holds alone pass `time_limit` (ops only add to them, see
    `Staggered`). Pure: the same arguments give the same steps."""
    rng = random.Random(seed)
    entries = [(entry,) if isinstance(entry, str) else tuple(entry) for entry in faults]
    minimum = dict(holds or {})
    chosen: list[Step] = []
    elapsed = 0.0
    first = True
    while entries:
        steps = []
        for entry in rng.sample(entries, len(entries)):
            name = rng.choice(entry)
            fault = FAULTS[name]
            value = rng.choice(fault.values)
            wait = rng.uniform(0, 2 * interval)
            hold = (max(rng.uniform(0, 2 * interval), minimum.get(name, 0.0))
                    if fault.stop else None)
            steps.append(Step(name, value, wait, hold))
        if first:
            steps = fit_round(steps, time_limit, minimum)
            first = False
        for step in steps:
            elapsed += step.wait
            if elapsed >= time_limit:
                return tuple(chosen)
            chosen.append(step)
            elapsed += step.hold or 0.0
    return tuple(chosen)


@dataclass(frozen=True)
class Step:
    """One fault of a round: seconds to wait before starting it, after the previous op
    completed, and to hold it after its start completed (None for a one-shot fault). A step
    of a fitted round (`fit_round`) also has its planned start, `at`: it starts then, or as
    soon as the previous op completed when that is later, so slow ops use up the waits after
    them instead of pushing the round past the time limit."""

    name: str
    value: Any
    wait: float
    hold: float | None
    at: float | None = None  # in a fitted round: seconds since the test started it is due


def fit_round(steps: Sequence[Step], time_limit: float,
              holds: Mapping[str, float]) -> list[Step]:
    """`steps` ending by `ROUND_SHARE` of the time limit: when they would end later, every
    wait and every hold beyond its minimum (`holds`) scaled down by one factor, and each
    step given its planned start (`Step.at`)."""
    budget = ROUND_SHARE * time_limit
    fixed = sum(holds.get(step.name, 0.0) for step in steps if step.hold is not None)
    flexible = sum(step.wait + (step.hold - holds.get(step.name, 0.0) if step.hold is not None
                                else 0.0) for step in steps)
    if fixed + flexible <= budget or flexible <= 0:
        return list(steps)
    scale = max(0.0, budget - fixed) / flexible
    fitted = []
    elapsed = 0.0
    for step in steps:
        minimum = holds.get(step.name, 0.0)
        wait = step.wait * scale
        hold = None if step.hold is None else minimum + (step.hold - minimum) * scale
        elapsed += wait
        fitted.append(replace(step, wait=wait, hold=hold, at=elapsed))
        elapsed += hold or 0.0
    return fitted


def schedule_need(entries: Sequence[Sequence[str]], interval: float,
                  holds: Mapping[str, float]) -> float:
    """Seconds the asked faults need to start once each at `interval`: an interval before
    each entry, and the longest minimum hold of its faults."""
    return sum(interval + max((holds.get(name, 0.0) for name in entry if FAULTS[name].stop),
                              default=0.0) for entry in entries)


def schedule_note(entries: Sequence[Sequence[str]], time_limit: float, interval: float,
                  holds: Mapping[str, float]) -> str | None:
    """None when the asked faults (`asked`'s entries) fit the time limit at `interval`;
    else what `package` does about it (shortens the first round), in the options' words.
    ValueError when their minimum holds alone do not fit."""
    held = schedule_need(entries, 0.0, holds)
    if entries and held >= ROUND_SHARE * time_limit:
        longest = ", ".join(f"{name} {seconds:g} s" for name, seconds in holds.items()
                            if any(name in entry for entry in entries))
        raise ValueError(f"--nemesis: the asked faults hold for at least {held:g} s "
                         f"({longest}), which does not fit --time-limit {time_limit:g} s; "
                         f"raise --time-limit above {held / ROUND_SHARE:.0f} s")
    need = schedule_need(entries, interval, holds)
    if need <= time_limit:
        return None
    fitting = (time_limit - held) / len(entries)
    return (f"{len(entries)} asked fault(s) need about {need:.0f} s at --nemesis-interval "
            f"{interval:g} s, more than --time-limit {time_limit:g} s: the first round is "
            f"shortened so each starts once (raise --time-limit to {need:.0f} s or lower "
            f"--nemesis-interval to {fitting:.1f} s to keep the waits)")


# Each kind of fault: how to build its nemesis from the shared firewall, a seeded random
# and the run's consumers.


def package(names: str | Iterable[str], seed: int = 0, time_limit: float = 60.0,
            interval: float = 10.0,
            consumer_session_timeout: float = DEFAULT_SESSION_TIMEOUT,
            broker_session_timeout: float = BROKER_SESSION_TIMEOUT,
            offer: Offer | None = None) -> Package:
    """The faults `names` says, scheduled from `seed`; a group named stands for those of
    its faults `offer` can serve. `consumer_session_timeout` (seconds) is the workload's
    group session timeout, which `pause-consumers` outlasts; `broker_session_timeout` the
    brokers' session with a KRaft controller, which `fence-broker` outlasts. ValueError
    when the faults' minimum holds do not fit `time_limit`."""
    entries = asked(names, offer)
    faults = [name for entry in entries for name in entry]
    rng = random.Random(seed)
    firewall = Firewall()
    consumers = Consumers(consumer_session_timeout)
    kinds = list(dict.fromkeys(FAULTS[name].kind for name in faults))
    nemesis = compose([kind(firewall, random.Random(rng.random()), consumers)
                       for kind in kinds] + [HealNemesis(firewall)])
    stops = list(dict.fromkeys(FAULTS[n].stop for n in faults if FAULTS[n].stop))
    final = tuple(_op(f) for f in stops) + (_op("heal"),)
    perf = tuple({"name": name, "start": FAULTS[name].start, "stop": FAULTS[name].stop}
                 for name in faults)
    minimum = {"pause-consumers": consumers.session_timeout + PAUSE_MARGIN,
               "fence-broker": broker_session_timeout + FENCE_MARGIN}
    holds = {name: minimum[name] for name in faults if name in minimum}
    note = schedule_note(entries, time_limit, interval, holds)
    steps = schedule_steps(entries, seed, time_limit, interval, holds)
    return Package(nemesis, Staggered(steps, _ns(time_limit)), Schedule(final), perf,
                   tuple(faults), consumers, note)


@dataclass(frozen=True, kw_only=True)
class NemesisOptions:
    """The nemesis package's options (see `harness.options`)."""

    nemesis: str = field(default="partition,kill,pause", metadata={
        "help": "faults or groups, 'none' for none", "metavar": "A,B,..."})
    nemesis_interval: float = field(default=10.0, metadata={
        "help": "mean seconds between fault changes", "metavar": "SECONDS"})

    def __post_init__(self) -> None:
        if not self.nemesis.strip(" ,"):
            raise ValueError("nemesis is empty: name faults or groups (e.g. partition,kill), "
                             "or 'none' to ask for no faults")
        expand(self.nemesis)
        if self.nemesis_interval <= 0:
            raise ValueError("nemesis_interval must be > 0 seconds")


def noop() -> Package:
    """No faults; the final heal still runs."""
    return package([], 0)
