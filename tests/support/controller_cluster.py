"""Controllers on a real ZooKeeper with fake data planes, for the controller tests."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

from kazoo.client import KazooClient

from broker import control_plane as cp
from broker import zk as zkl
from broker.controller import Controller, ControllerConfig
from tests.support.control_plane import Recorder as PlaneRecorder

SESSION_TIMEOUT = 4.0


async def blocking(fn, *args):
    return await asyncio.get_running_loop().run_in_executor(None, fn, *args)


class ClusterRecorder(PlaneRecorder):
    """Fake data plane: records every control request it gets, and answers queries on them."""

    def states(self, topic: str, partition: int) -> list[cp.PartitionStateInfo]:
        return [s for r in self.received if isinstance(r, cp.LeaderAndIsrRequest)
                for s in r.partition_states if (s.topic, s.partition) == (topic, partition)]

    def stops(self) -> list[cp.StopReplicaRequest]:
        return [r for r in self.received if isinstance(r, cp.StopReplicaRequest)]


class FakeBroker:
    def __init__(self, broker_id: int, hosts: str, directory: Path, config: ControllerConfig):
        self.broker_id = broker_id
        self.hosts = hosts
        self.event_log = directory / f"broker-{broker_id}" / "controller-events.jsonl"
        self.config = config
        self.alive = False

    async def start(self) -> None:
        self.zk = KazooClient(hosts=self.hosts, timeout=SESSION_TIMEOUT)
        await blocking(self.zk.start, 10)
        self.recorder = ClusterRecorder()
        self.controller = Controller(self.broker_id, self.zk, self.config, self.event_log)
        self.server = cp.ControlPlaneServer("127.0.0.1", 0, self.recorder,
                                            self.controller.controlled_shutdown)
        await self.server.start()
        reg = zkl.BrokerRegistration(self.broker_id, "127.0.0.1", 10000 + self.broker_id,
                                     "127.0.0.1", self.server.port, None)
        self.broker_epoch = await blocking(zkl.register_broker, self.zk, reg)
        await self.controller.start()
        self.alive = True

    async def crash(self) -> None:
        """Lose the ZooKeeper session (ephemeral znodes go), then stop everything."""
        if not self.alive:
            return
        self.alive = False
        await blocking(self.zk.stop)
        await self.controller.stop()
        await self.server.stop()
        await blocking(self.zk.close)

    def log_lines(self) -> list[dict]:
        if not self.event_log.exists():
            return []
        return [json.loads(line) for line in self.event_log.read_text().splitlines()]


async def wait_for(predicate, timeout: float = 10.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")
