"""The subscribe workload (consumer groups) with real clients against a loopback cluster."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from checker.groups.checker import GroupsChecker
from checker.history import HistoryWriter, load_history
from checker.queue.analysis import QueueChecker
from tests.support.brokers import BrokerCluster
from tests.support.java_client import java_runtime
from workloads.core import final
from workloads.core import generator as gen
from workloads.core.part import Workload
from workloads.core.worker import Interpreter
from workloads.queue import QueueOptions, queue_workload

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

BROKER = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
          "group.initial.rebalance.delay.ms": "0", "offsets.topic.num.partitions": "3"}
KEYS = 4
CONCURRENCY = 4
SESSION_TIMEOUT_MS = 6000


@pytest.fixture(scope="module")
def cluster(zookeeper, tmp_path_factory):
    with BrokerCluster(zookeeper.connect, tmp_path_factory.mktemp("subscribe"),
                       properties=dict(BROKER)) as running:
        yield running


def run_subscribe(cluster, path, client: str, commit: str, topic: str, *, groups: int = 1,
                  seconds: float = 16.0, crash_weight: float = 0.02,
                  during: Callable[[Workload], None] | None = None, java_runtime=None):
    """`seconds` of the subscribe workload, then its final phase; the ops, the test record,
    and the workload."""
    servers = tuple(b.bootstrap for b in cluster.brokers.values())
    options = QueueOptions(bootstrap_servers=servers, client=client, topic=topic, keys=KEYS,
                           concurrency=CONCURRENCY, rate=25, crash_weight=crash_weight,
                           seed=7, op_timeout=4, drain_idle_polls=6, sub_via="subscribe",
                           commit=commit, groups=groups, session_timeout_ms=SESSION_TIMEOUT_MS,
                           java_runtime=java_runtime)
    workload = queue_workload(options)
    whole = gen.phases(
        gen.time_limit(seconds, gen.clients(workload.generator)),
        final.final_phase({"f": "heal", "type": "info"}, workload.final_generator,
                          recovery_seconds=0.5, client_seconds=60))
    with HistoryWriter(path) as history:
        interpreter = Interpreter({}, workload.client, history, concurrency=CONCURRENCY,
                                  nodes=list(servers), op_timeout=options.op_timeout)
        interpreter.setup_clients()
        worker = threading.Thread(target=interpreter.run, args=(whole,),
                                  kwargs={"time_limit": seconds + 90})
        worker.start()
        try:
            if during is not None:
                during(workload)
        finally:
            worker.join()
            interpreter.teardown_clients()
    test = {"acks": "all", "broker_config": BROKER, "final_reads": True,
            **workload.test_fields}
    return load_history(path), test, workload


def completions(ops, f: str) -> list[Any]:
    return [op for op in ops if op.f == f and op.type != "invoke"]


def entries(ops) -> list[dict[str, Any]]:
    return [entry for op in ops for entry in op.extra.get("rebalances") or ()]


def assert_valid(ops, test) -> None:
    queue = QueueChecker().check(test, ops, {})
    assert queue.valid is True, queue.anomalies
    groups = GroupsChecker().check(test, ops, {})
    assert groups.valid is True, json.dumps(groups.to_json(), default=str)
    assert groups.stats["applicable"] is True


def assert_group_shape(ops, workload: Workload, groups: int) -> None:
    names = [f"g{i}" for i in range(groups)]
    assert workload.groups() == names
    subscribes = completions(ops, "subscribe")
    assert subscribes and all(op.type == "ok" for op in subscribes[:CONCURRENCY])
    assert {op.value["group"] for op in subscribes} == set(names)
    assert all(op.extra["group"] == op.value["group"] for op in subscribes)
    members = {op.process for op in subscribes}
    assert all("group" in op.extra for op in ops if op.process in members)
    found = entries(ops)
    for name in names:
        assigned = {k for e in found if e["group"] == name for k in e["assigned"]}
        assert assigned == set(range(KEYS)), (name, assigned)
    assert all(isinstance(e["time"], int) and 0 < e["time"] <= ops[-1].time for e in found)
    assert all(bool(e["assigned"]) != bool(e["revoked"]) for e in found)
    assert any(e["revoked"] for e in found), "crashes make the groups rebalance"
    committed = completions(ops, "committed")
    assert sorted(op.value["group"] for op in committed) == names
    assert all(op.type == "ok" and set(op.value["offsets"]) == {str(k) for k in range(KEYS)}
               for op in committed)
    assert any(op.value["offsets"][str(k)] is not None for op in committed for k in range(KEYS))
    final_polls = [op for op in ops if op.f == "poll" and op.extra.get("final")]
    crashes = [op for op in completions(ops, "crash") if op.index < final_polls[0].index]
    assert crashes and all(op.extra["group"] for op in crashes)
    assert final_polls and all("group" in op.extra for op in final_polls)
    first_committed = min(op.index for op in committed)
    assert all(op.index < first_committed for op in final_polls)
    drain = [op for op in ops if op.index > first_committed and op.f == "assign"]
    assert drain, "the assign-mode drain follows"
    assert {op.value for op in completions(ops, "crash") if "group" in op.extra} <= {
        "close", "abandon"}


@pytest.mark.parametrize(("client", "commit", "groups"), [
    ("confluent", "after-process", 2),
    pytest.param("confluent", "before-process", 1, marks=pytest.mark.clients),
    ("confluent", "auto", 1),
    pytest.param("kafka-python", "after-process", 1, marks=pytest.mark.clients),
])
def test_subscribe_workload_history_is_valid(cluster, tmp_path, client, commit, groups):
    started = time.monotonic()
    ops, test, workload = run_subscribe(cluster, tmp_path / "history.jsonl", client, commit,
                                        f"sub-{client}-{commit}", groups=groups)
    assert test["sub_via"] == "subscribe" and test["commit"] == commit
    assert test["groups"] == groups and test["session_timeout_ms"] == SESSION_TIMEOUT_MS
    assert_group_shape(ops, workload, groups)
    polls = [op for op in completions(ops, "poll") if op.type == "ok" and "group" in op.extra]
    commits = completions(ops, "commit")
    if commit == "after-process":
        assert sum(op.type == "ok" for op in commits) > 10
        assert not any("commit" in op.extra for op in polls)
    elif commit == "before-process":
        assert not commits
        with_commit = [op for op in polls if "commit" in op.extra]
        assert len(with_commit) > 10
        assert all(set(op.extra["commit"]) >= {"offsets", "type", "time"} for op in with_commit)
    else:
        assert not commits and not any("commit" in op.extra for op in polls)
    if client == "kafka-python":
        assert any(e["generation"] is not None and e["member"] for e in entries(ops))
    else:
        assert all(e["generation"] is None for e in entries(ops))
        assert any(e["member"] for e in entries(ops))
    assert workload.consumer_pids() == []
    assert_valid(ops, test)
    assert time.monotonic() - started < 90


@pytest.mark.parametrize("client", ["confluent",
                                    pytest.param("kafka-python", marks=pytest.mark.clients),
                                    pytest.param("java", marks=pytest.mark.clients)])
def test_every_client_keeps_polling_once_the_topic_grows(cluster, tmp_path, client):
    """`add-partitions` gives the group partitions that map to no key. Found by the clients
    night: kafka-python's member looked their keys up inside its rebalance callback, which
    raised, so every poll of every rebalance after the growth failed ("User rebalance
    callback throws an error") and its members were replaced over and over."""
    topic = f"grow-{client}"

    def grow(workload: Workload) -> None:
        time.sleep(5)
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_partitions([NewPartitions(topic, KEYS + 2)])[topic].result(timeout=30)

    ops, test, _ = run_subscribe(cluster, tmp_path / "history.jsonl", client, "after-process",
                                 topic, crash_weight=0, during=grow,
                                 java_runtime=java_runtime() if client == "java" else None)
    failed = [op for op in completions(ops, "poll") if op.type == "info"
              and "callback" in str(op.extra.get("error"))]
    assert not failed, failed[0]
    late = [op for op in completions(ops, "poll") if op.type == "ok" and op.time > 8e9
            and "group" in op.extra and not op.extra.get("final")]
    assert len(late) > 20, "the members poll on after the growth"
    assert len(completions(ops, "subscribe")) == CONCURRENCY, "no member was replaced"
    assert_valid(ops, test)


def test_stopped_consumer_times_out_and_its_group_rebalances(cluster, tmp_path):
    stopped: list[tuple[int, int]] = []

    def stop_one(workload: Workload) -> None:
        deadline = time.monotonic() + 20
        while len(workload.consumer_pids()) < CONCURRENCY and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(3)
        pid = workload.consumer_pids()[0]
        stopped.append((pid, time.monotonic_ns()))
        os.kill(pid, signal.SIGSTOP)
        time.sleep(SESSION_TIMEOUT_MS / 1000 + 3)
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass
        assert pid not in workload.consumer_pids()

    ops, test, workload = run_subscribe(cluster, tmp_path / "history.jsonl", "confluent",
                                        "after-process", "sub-stopped", seconds=18,
                                        crash_weight=0, during=stop_one)
    assert stopped
    timed_out = [op for op in ops if op.type == "info" and op.f in ("poll", "commit")
                 and "timeout" in str(op.extra.get("error"))]
    assert timed_out, "the stopped consumer's op times out"
    lost_at = timed_out[0].time
    later = [e for e in entries(ops) if e["time"] > lost_at - 4 * 10**9 and e["assigned"]]
    assert later, "the others are assigned the stopped member's keys"
    assert_valid(ops, test)
