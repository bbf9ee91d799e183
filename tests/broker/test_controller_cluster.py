"""Controllers against a real ZooKeeper: several Controller instances in one process, each with
its own KazooClient and a real control-plane server whose fake data plane records requests."""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
import uuid
from pathlib import Path

import pytest
from kazoo.client import KazooClient

from broker import control_plane as cp
from broker import zk as zkl
from broker.controller import ControllerConfig, assign_replicas
from tests.support.controller_cluster import SESSION_TIMEOUT, FakeBroker, blocking, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(120)]











@contextlib.asynccontextmanager
async def cluster(zookeeper, tmp_path: Path, n: int = 3, **config):
    chroot = f"/c-{uuid.uuid4().hex[:8]}"
    admin = KazooClient(hosts=zookeeper.connect)
    await blocking(admin.start, 10)
    await blocking(admin.ensure_path, chroot)
    admin.chroot = chroot
    await blocking(zkl.ensure_paths, admin)
    settings = ControllerConfig(**{"auto_leader_rebalance_enable": False, **config})
    brokers = [FakeBroker(i, zookeeper.connect + chroot, tmp_path, settings)
               for i in range(1, n + 1)]
    try:
        for broker in brokers:
            await broker.start()
        await wait_for(lambda: any(b.controller.is_active for b in brokers), what="a controller")
        yield admin, brokers
    finally:
        for broker in brokers:
            await broker.crash()
        await blocking(admin.stop)
        await blocking(admin.close)


def active(brokers) -> FakeBroker:
    (controller,) = [b for b in brokers if b.alive and b.controller.is_active]
    return controller


def state(admin, topic, partition) -> zkl.LeaderIsr | None:
    current = zkl.read_partition_state(admin, topic, partition)
    return current[0] if current else None


async def wait_state(admin, topic, partition, predicate, what):
    return await wait_for(
        lambda: (s := state(admin, topic, partition)) is not None and predicate(s) and s,
        what=what)


async def set_isr(admin, topic, partition, isr):
    """What a leader does: CAS the ISR in the state znode and notify the controller."""
    current, version = zkl.read_partition_state(admin, topic, partition)
    new = zkl.LeaderIsr(current.leader, current.leader_epoch, tuple(isr),
                        current.controller_epoch)
    assert zkl.update_partition_state(admin, topic, partition, new, version) is not None
    zkl.notify_isr_change(admin, [(topic, partition)])


def run(coro):
    asyncio.run(coro)


def test_election_failover_and_stale_epoch(zookeeper, tmp_path):
    async def scenario():
        async with cluster(zookeeper, tmp_path) as (admin, brokers):
            first = active(brokers)
            assert first.controller.epoch == 1
            assert zkl.read_controller(admin) == first.broker_id
            assert zkl.read_controller_epoch(admin)[0] == 1
            await asyncio.sleep(0.5)
            assert sum(b.controller.is_active for b in brokers) == 1
            others = [b for b in brokers if b is not first]
            started = time.monotonic()
            await first.crash()
            await wait_for(lambda: any(b.controller.is_active for b in others),
                           timeout=SESSION_TIMEOUT + 2, what="a new controller")
            elapsed = time.monotonic() - started
            second = active(others)
            assert second.controller.epoch == 2 and elapsed < SESSION_TIMEOUT + 2
            print(f"controller takeover after session close: {elapsed * 1000:.0f} ms")
            assert zkl.read_controller_epoch(admin)[0] == 2
            assert any(line["event"] == "resign" for line in first.log_lines())
            assert [line["controller_epoch"] for line in second.log_lines()
                    if line["event"] == "become-controller"] == [2]
            for broker in others:
                await wait_for(lambda b=broker: b.server.highest_controller_epoch == 2,
                               what="UpdateMetadata from the new controller")
            channel = cp.ControllerChannel(request_timeout=5)
            victim = others[0]
            channel.add_broker(cp.BrokerEndpoint(victim.broker_id, "127.0.0.1",
                                                 victim.server.port))
            stale = cp.LeaderAndIsrRequest(first.broker_id, 1, victim.broker_epoch, (), ())
            response = await channel.send(victim.broker_id, stale)
            await channel.close()
            assert response.error_code == cp.STALE_CONTROLLER_EPOCH
            assert stale not in victim.recorder.received

    run(scenario())


def test_topic_creation_sends_leader_and_isr(zookeeper, tmp_path):
    async def scenario():
        async with cluster(zookeeper, tmp_path) as (admin, brokers):
            controller = active(brokers)
            assignment = assign_replicas([(b.broker_id, None) for b in brokers], 6, 2,
                                         random.Random(5))
            zkl.create_topic(admin, "orders", assignment, {"min.insync.replicas": "2"})
            for partition, replicas in assignment.items():
                s = await wait_state(admin, "orders", partition, lambda s: True, "state znode")
                assert s == zkl.LeaderIsr(replicas[0], 0, tuple(replicas), 1)
            for broker in brokers:
                mine = [p for p, r in assignment.items() if broker.broker_id in r]
                await wait_for(lambda b=broker, m=mine: all(b.recorder.states("orders", p)
                                                            for p in m),
                               what=f"LeaderAndIsr at broker {broker.broker_id}")
                for p in mine:
                    info = broker.recorder.states("orders", p)[0]
                    assert info.leader == assignment[p][0] and info.is_new
                    assert info.replicas == tuple(assignment[p]) and info.controller_epoch == 1
                others = {p for p, r in assignment.items() if broker.broker_id not in r}
                assert not any(broker.recorder.states("orders", p) for p in others)
            lines = [line for line in controller.log_lines() if line["event"] == "new-partition"]
            assert {(line["partition"], line["new_leader"]) for line in lines} == {
                (p, r[0]) for p, r in assignment.items()}

    run(scenario())


def test_broker_failure_moves_leadership_to_isr_member(zookeeper, tmp_path):
    async def scenario():
        async with cluster(zookeeper, tmp_path) as (admin, brokers):
            controller = active(brokers)
            a, b = [x for x in brokers if x is not controller]
            c = controller
            zkl.create_topic(admin, "t", {0: [a.broker_id, b.broker_id, c.broker_id],
                                          1: [b.broker_id, a.broker_id, c.broker_id]}, None)
            await wait_state(admin, "t", 0, lambda s: s.leader == a.broker_id, "initial leader")
            started = time.monotonic()
            await a.crash()
            s = await wait_state(admin, "t", 0, lambda s: s.leader != a.broker_id, "new leader")
            print(f"new leader written {1000 * (time.monotonic() - started):.0f} ms after "
                  "the old leader's session closed")
            assert s == zkl.LeaderIsr(b.broker_id, 1, (b.broker_id, c.broker_id), 1)
            s1 = await wait_state(admin, "t", 1, lambda s: a.broker_id not in s.isr, "ISR shrink")
            assert (s1.leader, s1.isr) == (b.broker_id, (b.broker_id, c.broker_id))
            await wait_for(lambda: any(i.leader == b.broker_id and i.leader_epoch == 1
                                       for i in b.recorder.states("t", 0)),
                           what="LeaderAndIsr to the new leader")
            elections = [line for line in controller.log_lines()
                         if line["event"] == "elect-leader" and line["partition"] == 0]
            assert len(elections) == 1
            line = elections[0]
            assert (line["selector"], line["old_leader"], line["new_leader"], line["unclean"],
                    line["leader_epoch"], line["isr"]) == (
                "offline", a.broker_id, b.broker_id, False, 1, [b.broker_id, c.broker_id])
            assert line["controller_epoch"] == 1 and line["topic"] == "t"

    run(scenario())


def test_isr_of_only_the_dead_leader_clean_and_unclean(zookeeper, tmp_path):
    async def scenario():
        async with cluster(zookeeper, tmp_path) as (admin, brokers):
            controller = active(brokers)
            a, b = [x for x in brokers if x is not controller]
            for topic, unclean in (("clean", "false"), ("unclean", "true")):
                zkl.create_topic(admin, topic, {0: [a.broker_id, b.broker_id]},
                                 {"unclean.leader.election.enable": unclean})
                await wait_state(admin, topic, 0, lambda s: s.leader == a.broker_id, "leader")
                await set_isr(admin, topic, 0, [a.broker_id])
            await wait_for(lambda: sum(line["event"] == "isr-change"
                                       for line in controller.log_lines()) == 2,
                           what="ISR change notifications processed")
            await a.crash()
            offline = await wait_state(admin, "clean", 0, lambda s: s.leader == -1, "offline")
            assert offline.isr == (a.broker_id,)
            elected = await wait_state(admin, "unclean", 0, lambda s: s.leader == b.broker_id,
                                       "unclean leader")
            assert elected.isr == (b.broker_id,)
            # The controller logs a change after its znode write, so wait for the lines.
            await wait_for(lambda: {"elect-leader", "leader-offline"}
                           <= {x["event"] for x in controller.log_lines()},
                           what="the unclean election and the offline leader logged")
            lines = controller.log_lines()
            (unclean_line,) = [x for x in lines if x["event"] == "elect-leader"]
            assert (unclean_line["topic"], unclean_line["unclean"], unclean_line["selector"],
                    unclean_line["new_leader"]) == ("unclean", True, "offline", b.broker_id)
            (offline_line,) = [x for x in lines if x["event"] == "leader-offline"]
            assert (offline_line["topic"], offline_line["new_leader"]) == ("clean", -1)
            await a.start()
            back = await wait_state(admin, "clean", 0, lambda s: s.leader == a.broker_id,
                                    "leader back after the ISR member returns")
            assert back.isr == (a.broker_id,)

    run(scenario())


def test_controlled_shutdown_moves_leadership_first(zookeeper, tmp_path):
    async def scenario():
        async with cluster(zookeeper, tmp_path) as (admin, brokers):
            controller = active(brokers)
            a, b = [x for x in brokers if x is not controller]
            c = controller
            ids = (a.broker_id, b.broker_id, c.broker_id)
            zkl.create_topic(admin, "t", {0: list(ids), 1: [b.broker_id, a.broker_id,
                                                            c.broker_id]}, None)
            await wait_state(admin, "t", 1, lambda s: s.leader == b.broker_id, "leaders")
            await wait_state(admin, "t", 0, lambda s: s.leader == a.broker_id, "leaders")
            code, remaining = await cp.request_controlled_shutdown(
                "127.0.0.1", b.server.port, a.broker_id, a.broker_epoch, 5)
            assert code == cp.NOT_CONTROLLER
            code, remaining = await cp.request_controlled_shutdown(
                "127.0.0.1", c.server.port, a.broker_id, a.broker_epoch + 1, 5)
            assert code == 77
            code, remaining = await cp.request_controlled_shutdown(
                "127.0.0.1", c.server.port, a.broker_id, a.broker_epoch, 5)
            assert (code, remaining) == (0, [])
            assert state(admin, "t", 0) == zkl.LeaderIsr(b.broker_id, 1,
                                                         (b.broker_id, c.broker_id), 1)
            s1 = state(admin, "t", 1)
            assert s1.leader == b.broker_id and a.broker_id not in s1.isr
            await wait_for(lambda: any(r.partitions == (("t", 0), ("t", 1))
                                       and not r.delete_partitions
                                       for r in a.recorder.stops()), what="StopReplica")
            (line,) = [x for x in controller.log_lines() if x["event"] == "elect-leader"]
            assert (line["selector"], line["old_leader"], line["new_leader"]) == (
                "controlled-shutdown", a.broker_id, b.broker_id)
            await a.crash()
            await asyncio.sleep(0.5)
            assert state(admin, "t", 0).leader == b.broker_id
            assert not [x for x in controller.log_lines()
                        if x["event"] == "elect-leader" and x["selector"] == "offline"]

    run(scenario())


def test_reassignment_and_preferred_election(zookeeper, tmp_path):
    async def scenario():
        async with cluster(zookeeper, tmp_path) as (admin, brokers):
            controller = active(brokers)
            a, b = [x for x in brokers if x is not controller]
            c = controller
            zkl.create_topic(admin, "r", {0: [a.broker_id, b.broker_id]}, None)
            await wait_state(admin, "r", 0, lambda s: s.leader == a.broker_id, "leader")
            zkl.write_reassignment(admin, {("r", 0): [b.broker_id, c.broker_id]})
            await wait_for(lambda: any(i.is_new for i in c.recorder.states("r", 0)),
                           what="new replica told to start")
            assert zkl.read_topic_assignment(admin, "r")[0] == [b.broker_id, c.broker_id,
                                                                a.broker_id]
            await set_isr(admin, "r", 0, [a.broker_id, b.broker_id, c.broker_id])
            await wait_for(lambda: not admin.exists(zkl.REASSIGN_PARTITIONS),
                           what="reassignment done")
            assert zkl.read_topic_assignment(admin, "r") == {0: [b.broker_id, c.broker_id]}
            s = state(admin, "r", 0)
            assert s.leader == b.broker_id and a.broker_id not in s.isr
            await wait_for(lambda: any(r.delete_partitions for r in a.recorder.stops()),
                           what="StopReplica(delete) to the removed replica")
            events = [x["event"] for x in controller.log_lines()]
            assert "reassign-start" in events and "reassign-complete" in events
            await set_isr(admin, "r", 0, [c.broker_id, b.broker_id])
            current, version = zkl.read_partition_state(admin, "r", 0)
            moved = zkl.LeaderIsr(c.broker_id, current.leader_epoch + 1, current.isr,
                                  current.controller_epoch)
            zkl.update_partition_state(admin, "r", 0, moved, version)
            zkl.notify_isr_change(admin, [("r", 0)])
            admin.create(zkl.PREFERRED_REPLICA_ELECTION,
                         b'{"version":1,"partitions":[{"topic":"r","partition":0}]}')
            await wait_state(admin, "r", 0, lambda s: s.leader == b.broker_id,
                             "preferred replica leads again")
            await wait_for(lambda: any(x["selector"] == "preferred"
                                       for x in controller.log_lines()
                                       if x["event"] == "elect-leader"),
                           what="the preferred election logged")

    run(scenario())


def test_auto_rebalance_and_zombie_controller_is_fenced(zookeeper, tmp_path):
    async def scenario():
        async with cluster(zookeeper, tmp_path, auto_leader_rebalance_enable=True,
                           leader_imbalance_check_interval_seconds=0.3) as (admin, brokers):
            controller = active(brokers)
            a, b = [x for x in brokers if x is not controller]
            zkl.create_topic(admin, "p", {0: [a.broker_id, b.broker_id]}, None)
            await wait_state(admin, "p", 0, lambda s: s.leader == a.broker_id, "leader")
            current, version = zkl.read_partition_state(admin, "p", 0)
            zkl.update_partition_state(admin, "p", 0, zkl.LeaderIsr(
                b.broker_id, current.leader_epoch + 1, current.isr, 1), version)
            zkl.notify_isr_change(admin, [("p", 0)])
            await wait_state(admin, "p", 0, lambda s: s.leader == a.broker_id,
                             "auto rebalance back to the preferred replica")
            epoch_version = controller.controller.ctx.epoch_zk_version
            admin.set(zkl.CONTROLLER_EPOCH, b"7")
            with pytest.raises(zkl.ControllerMovedError):
                zkl.write_partition_state_fenced(admin, "p", 0, current, 0, epoch_version)
            admin.delete(zkl.CONTROLLER)
            await wait_for(lambda: zkl.read_controller_epoch(admin)[0] == 8,
                           what="re-election after /controller deleted")

    run(scenario())


def test_added_partitions_and_topic_deletion(zookeeper, tmp_path):
    async def scenario():
        async with cluster(zookeeper, tmp_path) as (admin, brokers):
            controller = active(brokers)
            a, b = [x for x in brokers if x is not controller]
            zkl.create_topic(admin, "grow", {0: [a.broker_id, b.broker_id]}, None)
            await wait_state(admin, "grow", 0, lambda s: s.leader == a.broker_id, "leader")
            admin.set(f"{zkl.BROKER_TOPICS}/grow", json.dumps({
                "version": 2, "partitions": {"0": [a.broker_id, b.broker_id],
                                             "1": [b.broker_id, a.broker_id]}}).encode())
            s = await wait_state(admin, "grow", 1, lambda s: True, "added partition online")
            assert s == zkl.LeaderIsr(b.broker_id, 0, (b.broker_id, a.broker_id), 1)
            await wait_for(lambda: any(i.is_new for i in a.recorder.states("grow", 1)),
                           what="LeaderAndIsr for the added partition")
            admin.create(f"{zkl.DELETE_TOPICS}/grow")
            await wait_for(lambda: not admin.exists(f"{zkl.BROKER_TOPICS}/grow"),
                           what="topic znodes deleted")
            await wait_for(lambda: any(r.delete_partitions and ("grow", 1) in r.partitions
                                       for r in a.recorder.stops()),
                           what="StopReplica(delete) for the deleted topic")
            assert not admin.exists(f"{zkl.DELETE_TOPICS}/grow")
            assert "delete-topic" in [x["event"] for x in controller.log_lines()]
            assert ("grow", 0) not in controller.controller.ctx.assignments

    run(scenario())


def first_requests(broker: FakeBroker, controller_epoch: int) -> list:
    """The control requests `broker` got from the controller of `controller_epoch`, in order."""
    return [r for r in broker.recorder.received if r.controller_epoch == controller_epoch]


def described(request: cp.UpdateMetadataRequest, topic: str) -> set[int]:
    return {s.partition for s in request.partition_states if s.topic == topic}


def test_a_started_broker_and_a_new_controller_send_every_partition_before_leader_and_isr(
        zookeeper, tmp_path):
    """A broker learns every partition before a LeaderAndIsr makes it lead one (a
    transaction coordinator loaded first would take the partitions it does not know for
    deleted ones, and complete transactions without their markers there)."""
    async def scenario():
        async with cluster(zookeeper, tmp_path) as (admin, brokers):
            controller = active(brokers)
            a, b = [x for x in brokers if x is not controller]
            ids = [a.broker_id, b.broker_id, controller.broker_id]
            zkl.create_topic(admin, "t", {p: ids[p % 3:] + ids[:p % 3] for p in range(6)},
                             None)
            await wait_state(admin, "t", 0, lambda s: s.leader == a.broker_id, "leader")
            await a.crash()
            await wait_state(admin, "t", 0, lambda s: s.leader != a.broker_id, "new leader")
            await a.start()
            epoch = controller.controller.epoch
            await wait_for(lambda: any(isinstance(r, cp.LeaderAndIsrRequest)
                                       for r in first_requests(a, epoch)),
                           what="LeaderAndIsr to the restarted broker")
            first = first_requests(a, epoch)[0]
            assert isinstance(first, cp.UpdateMetadataRequest), first
            assert described(first, "t") == set(range(6))
            await controller.crash()
            await wait_for(lambda: a.controller.is_active or b.controller.is_active,
                           timeout=SESSION_TIMEOUT + 5, what="a new controller")
            epoch = active([a, b]).controller.epoch
            for broker in (a, b):
                await wait_for(lambda x=broker: any(isinstance(r, cp.LeaderAndIsrRequest)
                                                    for r in first_requests(x, epoch)),
                               what=f"LeaderAndIsr from the new controller to {broker.broker_id}")
                first = first_requests(broker, epoch)[0]
                assert isinstance(first, cp.UpdateMetadataRequest), first
                assert described(first, "t") == set(range(6))

    run(scenario())
