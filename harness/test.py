"""A test is a value made of small parts (docs/architecture.md, "A test is a set of parts").

    Test(name, seed, time_limit, store, nodes,
         db,        # the system under test: start() -> a running db (harness.db.part)
         workload,  # client factory + generators + final reads, built once the db is up
         nemesis,   # the fault package: nemesis, schedule, final heal, perf bands
         checker)   # one composed checker

`build_test(config)` is the only place where options become parts: each part comes from
its registry (`harness.db.registry.DBS`, `workloads.registry.WORKLOADS`, the faults of
`nemesis.package`, `checker.registry.CHECKERS`) and its own declared options.
A fault the db cannot serve (`DB.offer()`, `nemesis.capabilities`) is refused here, before
anything starts. `harness.runner.run_test(test)` uses only the parts; it hands the
workload, once built, to the nemesis package (`Package.consumers`), for the consumer-group
faults.
"""

from __future__ import annotations

import contextlib
import platform
import random
from dataclasses import dataclass, field, replace
from importlib import metadata
from pathlib import Path
from typing import Any

from checker.core import Composed
from checker.registry import FAULTS_CHECKER, checker_names, composed
from harness.config import ConfigError, TestConfig
from harness.control.backends import BackendOptions
from harness.db.kafka.broker import kafka_release
from harness.db.kafka.distribution import ZOOKEEPER_VERSION, KafkaUnavailable
from harness.db.kafka.distribution import fetch as fetch_kafka
from harness.db.part import DB, DBContext
from harness.db.registry import DBS
from harness.scenarios import SCENARIOS
from nemesis.capabilities import ClockControl, Offer
from nemesis.consumers import DEFAULT_SESSION_TIMEOUT
from nemesis.package import (
    BROKER_SESSION_TIMEOUT,
    FAULTS,
    Package,
    Schedule,
    check_applicable,
    expand,
    package,
)
from workloads.core.part import Workload, WorkloadContext, WorkloadKind
from workloads.kafka.java.build import JavaClientUnavailable, compiled
from workloads.registry import WORKLOADS

__all__ = ["Test", "WorkloadPart", "build_test", "versions"]


@dataclass(frozen=True)
class WorkloadPart:
    """A registered workload with its options; `build` makes it for a running db."""

    name: str
    kind: WorkloadKind
    options: Any

    def build(self, context: WorkloadContext) -> Workload:
        return self.kind.build(self.options, context)


@dataclass(frozen=True)
class Test:
    """One chaos test: its parts, and what the runner needs to drive them."""

    __test__ = False  # not a pytest test class, despite its name

    name: str
    seed: int
    time_limit: float
    store: Path
    nodes: int
    db: DB
    workload: WorkloadPart
    nemesis: Package
    checker: Composed
    recovery_seconds: float = 10.0
    final_read_seconds: float = 60.0
    spark_master: str | None = None
    scenario: str | None = None
    config: dict[str, Any] = field(default_factory=dict)
    check: bool = True  # False: the run ends once the history and node logs are stored

    @property
    def checkers(self) -> tuple[str, ...]:
        return tuple(self.checker.checkers)

    def record(self) -> dict[str, Any]:
        """test.json, written once when the run starts: configuration, parts, seed and
        versions (the runner records the running db's facts, the workload's fields, the
        start time and whether the final reads completed in progress.json)."""
        return {"name": self.name, "seed": self.seed, "scenario": self.scenario,
                "db": self.db.name, "workload": self.workload.name,
                "checkers": list(self.checkers), "config": self.config,
                **self.db.describe(), "time_limit": self.time_limit,
                "nemesis": ",".join(self.nemesis.faults) or "none",
                "versions": versions()}


def build_test(config: TestConfig) -> Test:
    """The test `config` describes; ConfigError when its parts cannot be built."""
    run = config.run
    seed = run.seed if run.seed is not None else random.SystemRandom().randrange(1 << 31)
    kind = WORKLOADS[run.workload]
    try:
        db = DBS[run.db].build(_with_group_protocol(config),
                               DBContext(run.nodes, _with_clocks(config)))
        _check_group_protocol(config.workload, db)
        workload_options = _with_java_client(config.workload, db)
        checker = composed(checker_names(run.checker) if run.checker
                           else (*kind.checkers_for(config.workload), FAULTS_CHECKER))
        offer = db.offer()
        nemesis = _nemesis(config, seed, offer)
        check_applicable(nemesis.faults, offer)
    except ValueError as error:
        raise ConfigError(str(error)) from error
    return Test(
        name=run.name or run.workload, seed=seed, time_limit=run.time_limit, store=Path(run.store),
        nodes=run.nodes, db=db, workload=WorkloadPart(run.workload, kind, workload_options),
        nemesis=nemesis, checker=checker,
        recovery_seconds=run.recovery_seconds, final_read_seconds=run.final_read_seconds,
        spark_master=run.spark_master, scenario=run.scenario,
        config=_as_run(config.to_json(), seed, nemesis if run.scenario else None),
        check=not run.no_check)


def _with_clocks(config: TestConfig) -> BackendOptions:
    """The backend's options, with movable node clocks when a fault asked for moves them
    (the clock library stays out of the node processes otherwise)."""
    try:
        names = expand(config.nemesis.nemesis)
    except ValueError:
        return config.backend
    if any(ClockControl in FAULTS[name].needs for name in names):
        return replace(config.backend, offset_clocks=True)
    return config.backend


def _consumer_protocol(options: Any) -> bool:
    return getattr(options, "group_protocol", "classic") == "consumer"


def _with_group_protocol(config: TestConfig) -> Any:
    """The db's options, with the consumer groups' timings on the coordinator when the
    workload's groups use the consumer protocol of KIP-848, whose coordinator owns the
    session and heartbeat: the workload's session timeout (unless the user set them)."""
    if not _consumer_protocol(config.workload):
        return config.db
    if config.run.db != "kafka":
        raise ValueError(f"--group-protocol consumer: the {config.run.db} broker implements "
                         "the classic group protocol of the design documents (JoinGroup, "
                         "SyncGroup, Heartbeat), not KIP-848's ConsumerGroupHeartbeat; use "
                         "--db kafka (4.x) or --group-protocol classic")
    session = config.workload.session_timeout_ms
    heartbeat = max(100, session // 3)
    timings = {"group.consumer.session.timeout.ms": session,
               "group.consumer.min.session.timeout.ms": min(session, 45_000),
               "group.consumer.heartbeat.interval.ms": heartbeat,
               "group.consumer.min.heartbeat.interval.ms": min(heartbeat, 5_000)}
    given = config.db.broker_config
    return replace(config.db, broker_config={
        **{name: str(value) for name, value in timings.items()}, **given})


def _check_group_protocol(options: Any, db: DB) -> None:
    """ValueError when the workload's groups use KIP-848 on a Kafka without it."""
    version = db.describe().get("broker", {}).get("version", "")
    if _consumer_protocol(options) and kafka_release(version) < (4, 0):
        raise ValueError(f"--group-protocol consumer needs Kafka 4.0 or later (KIP-848 came "
                         f"with it), not {version}: add --kafka-version 4.1.1 or drop it")


def _with_java_client(options: Any, db: DB) -> Any:
    """The workload's options with the Java client compiled, when they ask for it: against
    `java_client_version`'s jars, else the cluster's own Kafka, else Kafka 3.9.1 (the
    newest of the ZooKeeper era, for our broker). ValueError when neither can be had."""
    if getattr(options, "client", None) != "java":
        return options
    broker = db.describe().get("broker", {})
    version = options.java_client_version
    try:
        if version is None and broker.get("kind") == "kafka":
            version, libs = broker["version"], Path(broker["local_libs"])
        else:
            version = version or ZOOKEEPER_VERSION
            libs = fetch_kafka(version).libs
        return replace(options, java_runtime=compiled(version, libs))
    except (KafkaUnavailable, JavaClientUnavailable) as error:
        raise ValueError(f"--client java: {error}") from error


def _as_run(sections: dict[str, Any], seed: int, staged: Package | None) -> dict[str, Any]:
    """The configuration as recorded: the seed chosen, so the run can be repeated, and the
    faults a scenario staged (its own nemesis option is "none"), as test.json's `nemesis`."""
    recorded = {**sections, "run": {**sections["run"], "seed": seed}}
    if staged is not None:
        recorded["nemesis"] = {**sections["nemesis"],
                               "nemesis": ",".join(staged.faults) or "none"}
    return recorded


def _nemesis(config: TestConfig, seed: int, offer: Offer) -> Package:
    scenario = SCENARIOS.get(config.run.scenario or "")
    if scenario is None:
        broker_session_ms = getattr(config.db, "broker_config", {}).get(
            "broker.session.timeout.ms", BROKER_SESSION_TIMEOUT * 1000)
        return package(config.nemesis.nemesis, seed, config.run.time_limit,
                       config.nemesis.nemesis_interval, _session_timeout(config.workload),
                       int(broker_session_ms) / 1000, offer)
    staged = package(scenario.faults, seed, config.run.time_limit)
    return replace(staged, generator=Schedule(scenario.schedule(
        getattr(config.db, "broker_config", {}))))


def _session_timeout(options: Any) -> float:
    """The workload's consumer group session timeout in seconds (its `session_timeout_ms`
    option; Kafka's default, 6 s, for a workload without one)."""
    return getattr(options, "session_timeout_ms", DEFAULT_SESSION_TIMEOUT * 1000) / 1000


def versions() -> dict[str, str]:
    """Python's and the main libraries' versions, for test.json."""
    found = {"python": platform.python_version()}
    for name in ("kchaos", "confluent-kafka", "kafka-python", "kazoo", "pyspark"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            found[name] = metadata.version(name)
    return found
