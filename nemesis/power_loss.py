"""Power loss: kill -9 of brokers that lose what they had not fsynced.

The process kill is an ordinary SIGKILL; what makes it a power loss is the broker's
testing-only property `kchaos.debug.lose-unflushed-on-crash=true`, with which a broker
that starts after an unclean shutdown cuts each log back to its last fsynced offset (the
page cache a real power loss takes). The fault therefore needs `LosesUnflushed`, which only
our broker with that property set offers (any other db refuses the fault before anything
starts); Apache Kafka has no such property, and a real power loss needs machines to
switch off (VMs).

`crash-lose-unflushed` with value "one" (a random running broker), "leader" (of a random
partition), "replicas" (every running replica of one partition at once: the KIP-101
scenario where leader and follower both lose their unflushed tails) or
`{"target": ..., "topic": t, "partition": p}`; `power-on` starts every broker that is not
running. Completions: `{"n1": "crashed", ...}` (with "topic" and "partition" for a
partition's replicas), "no-target", or "not-started".
"""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from nemesis.base import BaseNemesis, completed, no_target
from nemesis.capabilities import HasLeaders, Killable, require
from nemesis.process import resolve_brokers
from nemesis.targets import leader_and_followers

__all__ = ["CrashLoseUnflushedNemesis"]


class CrashLoseUnflushedNemesis(BaseNemesis):
    fs = frozenset({"crash-lose-unflushed", "power-on"})

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng

    def invoke(self, cluster: Killable, op: dict) -> dict:
        if op["f"] == "power-on":
            started = {n: "started" for n in cluster.brokers if cluster.start(n)}
            return completed(op, started or "not-started")
        spec = op.get("value") or "one"
        options = spec if isinstance(spec, dict) else {"target": spec}
        named: dict[str, Any] = {}
        if options["target"] == "replicas":
            found = leader_and_followers(require(cluster, HasLeaders), self.rng,
                                         options.get("topic"), options.get("partition"),
                                         internal=False)
            targets = [] if found is None else [
                n for n in [found[1], *found[2]] if cluster.running(n)]
            if found is not None:
                named = {"topic": found[0].topic, "partition": found[0].partition}
        else:
            targets = resolve_brokers(cluster, spec, self.rng)
        with ThreadPoolExecutor(max_workers=max(len(targets), 1)) as pool:
            crashed = [n for n, ok in zip(targets, pool.map(cluster.kill, targets),
                                          strict=True) if ok]
        if not crashed:
            return no_target(op)
        return completed(op, {**named, **{n: "crashed" for n in crashed}})
