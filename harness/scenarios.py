"""Named scenarios: a configuration and a staged fault schedule in place of the random one.

`kchaos run --scenario NAME` layers `Scenario.config` and `Scenario.broker_config` over
the user's TOML (`harness.config.load_config`) and replaces the nemesis schedule with
`Scenario.schedule(broker_config)`: nemesis ops with the time (ns since the test started)
at which to invoke them, given the db's broker configuration.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SCENARIOS", "Scenario"]

NS_PER_SECOND = 1_000_000_000


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    config: Mapping[str, Any]
    broker_config: Mapping[str, str]
    schedule: Callable[[Mapping[str, str]], tuple[dict, ...]]
    faults: tuple[str, ...] = field(default=())


def _at(seconds: float, f: str, value: Any, fault: str) -> dict:
    """A nemesis op at `seconds`; `fault` names it as the scenario's faults do."""
    return {"type": "info", "process": "nemesis", "f": f, "value": value,
            "time": int(seconds * NS_PER_SECOND), "fault": fault}


def _unclean_2013(broker_config: Mapping[str, str]) -> tuple[dict, ...]:
    """Kafka 2013 (KAFKA-1211 era, Jepsen's Kafka post): the leader of partition 0 loses its
    followers but keeps ZooKeeper, shrinks the ISR to itself and, with min.insync.replicas=1,
    keeps acknowledging acks=all writes; then its ZooKeeper session expires, the controller
    elects an out-of-sync follower (unclean), and when the network heals the old leader
    truncates what it had acknowledged."""
    lag = float(broker_config.get("replica.lag.time.max.ms", 3000)) / 1000
    target = {"shape": "leader-from-followers", "topic": "kchaos", "partition": 0}
    isolated = 3.0
    expire = isolated + lag + 6.0
    heal = expire + 8.0
    leader = {"target": "leader", "topic": "kchaos", "partition": 0}
    return (
        _at(isolated, "start-partition", target, "leader-from-followers"),
        _at(expire, "expire-session", leader, "expire-session"),
        _at(heal, "stop-partition", None, "leader-from-followers"),
    )


SCENARIOS: dict[str, Scenario] = {
    "unclean-2013": Scenario(
        name="unclean-2013",
        description="cut a leader off from its followers, let it accept writes, expire its "
                    "ZooKeeper session, heal: acknowledged writes lost to an unclean election",
        config={"acks": "all", "time_limit": 30.0, "keys": 2, "nemesis": "none"},
        broker_config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1",
                       "replica.lag.time.max.ms": "3000"},
        schedule=_unclean_2013,
        faults=("leader-from-followers", "expire-session"),
    ),
}
