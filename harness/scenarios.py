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


# When the unclean-2013 scenario lifts its cut: the staged op waits for the ISR to shrink
# and for the election (ops run one at a time), so this is a latest, not a moment.
UNCLEAN_2013_HEAL = 20.0
# Seconds the leader acknowledges writes alone, once the ISR is the leader alone.
UNCLEAN_2013_HOLD = 2.0


def _unclean_2013(broker_config: Mapping[str, str]) -> tuple[dict, ...]:
    """Kafka 2013 (KAFKA-1211 era, Jepsen's Kafka post): a partition's leader loses its
    followers but keeps its metadata store (ZooKeeper, or dedicated controllers; on Kafka
    with ZooKeeper, a partition the controller leads). Driven by what the cluster shows,
    not by timers: one `shrink-isr` op waits until the ISR is the leader alone, holds 2 s
    while it acknowledges acks=all writes alone (min.insync.replicas=1), isolates it from
    every node, the store included, and waits for the controller to elect
    an out-of-sync follower (unclean); the cut is lifted after it, and the old leader
    truncates what it had acknowledged."""
    target = {"then": "isolate", "topic": "kchaos", "hold": UNCLEAN_2013_HOLD}
    fault = "shrink-isr-isolate-leader"
    return (_at(3.0, "shrink-isr", target, fault),
            _at(UNCLEAN_2013_HEAL, "heal-targeted", None, fault))


SCENARIOS: dict[str, Scenario] = {
    "unclean-2013": Scenario(
        name="unclean-2013",
        description="cut a leader off from its followers until the ISR is the leader alone, "
                    "let it accept writes, isolate it until an out-of-sync follower is "
                    "elected, heal: acknowledged writes lost to an unclean election",
        config={"acks": "all", "time_limit": 40.0, "keys": 2, "nemesis": "none"},
        broker_config={"unclean.leader.election.enable": "true", "min.insync.replicas": "1",
                       "replica.lag.time.max.ms": "3000"},
        schedule=_unclean_2013,
        faults=("shrink-isr-isolate-leader",),
    ),
}
