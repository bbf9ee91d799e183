"""kill -9 of the active controller: its ZooKeeper session is not closed but expires; another
controller must take over with a higher epoch within the session timeout + 2 s, and brokers
that saw the new epoch reject requests carrying the old one."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
from kazoo.client import KazooClient

from broker import control_plane as cp
from broker import zk as zkl
from broker.controller import ControllerConfig
from tests.support.controller_cluster import SESSION_TIMEOUT, FakeBroker, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]

CHILD = """
import asyncio, sys
from pathlib import Path
from kazoo.client import KazooClient
from broker import control_plane as cp, zk as zkl
from broker.controller import Controller, ControllerConfig

class Nothing:
    async def leader_and_isr(self, request):
        return {}
    async def update_metadata(self, request):
        return 0
    async def stop_replica(self, request):
        return {}

async def main(hosts, log_path):
    zk = KazooClient(hosts=hosts, timeout=float(sys.argv[3]))
    zk.start(timeout=10)
    controller = Controller(1, zk, ControllerConfig(auto_leader_rebalance_enable=False),
                            Path(log_path))
    server = cp.ControlPlaneServer("127.0.0.1", 0, Nothing(), controller.controlled_shutdown)
    await server.start()
    zkl.register_broker(zk, zkl.BrokerRegistration(1, "127.0.0.1", 10001, "127.0.0.1",
                                                   server.port, None))
    await controller.start()
    await asyncio.Event().wait()

asyncio.run(main(sys.argv[1], sys.argv[2]))
"""


def test_kill_9_of_the_controller(zookeeper, tmp_path):
    chroot = f"/k-{uuid.uuid4().hex[:8]}"
    admin = KazooClient(hosts=zookeeper.connect)
    admin.start(timeout=10)
    admin.ensure_path(chroot)
    admin.chroot = chroot
    zkl.ensure_paths(admin)
    hosts = zookeeper.connect + chroot
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, hosts, str(tmp_path / "child-events.jsonl"),
         str(SESSION_TIMEOUT)],
        cwd=os.getcwd(), stdout=subprocess.DEVNULL, stderr=open(tmp_path / "child.err", "wb"))

    async def scenario():
        await wait_for(lambda: zkl.read_controller(admin) == 1, timeout=30,
                       what="the child process to become controller")
        assert zkl.read_controller_epoch(admin)[0] == 1
        config = ControllerConfig(auto_leader_rebalance_enable=False)
        brokers = [FakeBroker(i, hosts, tmp_path, config) for i in (2, 3)]
        try:
            for broker in brokers:
                await broker.start()
            await wait_for(lambda: all(b.server.highest_controller_epoch == 1 for b in brokers),
                           what="UpdateMetadata from the first controller")
            started = time.monotonic()
            child.send_signal(signal.SIGKILL)
            child.wait(timeout=10)
            await wait_for(lambda: any(b.controller.is_active for b in brokers),
                           timeout=SESSION_TIMEOUT + 2, what="a new controller")
            elapsed = time.monotonic() - started
            new = next(b for b in brokers if b.controller.is_active)
            assert new.controller.epoch == 2 and elapsed < SESSION_TIMEOUT + 2
            other = next(b for b in brokers if b is not new)
            await wait_for(lambda: other.server.highest_controller_epoch == 2,
                           what="the new epoch at the other broker")
            channel = cp.ControllerChannel(request_timeout=5)
            channel.add_broker(cp.BrokerEndpoint(other.broker_id, "127.0.0.1",
                                                 other.server.port))
            stale = cp.UpdateMetadataRequest(1, 1, other.broker_epoch, (), ())
            response = await channel.send(other.broker_id, stale)
            await channel.close()
            assert response.error_code == cp.STALE_CONTROLLER_EPOCH
            print(f"controller takeover after kill -9: {elapsed:.2f} s "
                  f"(session timeout {SESSION_TIMEOUT} s)")
        finally:
            for broker in brokers:
                await broker.crash()

    try:
        asyncio.run(scenario())
    finally:
        if child.poll() is None:
            child.kill()
            child.wait(timeout=10)
        admin.stop()
        admin.close()

