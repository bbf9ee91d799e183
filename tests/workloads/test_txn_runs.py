"""Transactional workloads on three loopback brokers of our broker and of real Apache Kafka
3.9.1: a short `--txn` run of the queue workload with aborts on purpose (confluent-kafka;
the Java client in `make test-clients`), a short transfer
run, and a plain run with idempotent producers, each valid under the checkers their
workloads name. `make test` runs them on our broker; `make test-clients` on Kafka too."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from checker.history import HistoryWriter, load_history
from checker.registry import composed
from tests.support import requirements
from tests.support.group_storyline import new_cluster, system_unavailable
from tests.support.java_client import java_runtime
from workloads.core import final
from workloads.core import generator as gen
from workloads.core.part import Workload
from workloads.core.worker import Interpreter
from workloads.queue import QueueOptions, checkers, queue_workload
from workloads.transfer.workload import CHECKERS as TRANSFER_CHECKERS
from workloads.transfer.workload import TransferOptions, transfer_workload

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

BROKER = {"min.insync.replicas": "2", "unclean.leader.election.enable": "false",
          "transaction.state.log.num.partitions": "3",
          "transaction.state.log.replication.factor": "3",
          "transaction.state.log.min.isr": "2"}
OFFLINE = ("elections",)  # needs the node logs of a run folder


def systems() -> list:
    """Our broker; Apache Kafka, the reference, marked `clients`."""
    params = []
    for system in ("kchaos", "kafka"):
        unmet = system_unavailable(system)
        marks = [requirements.needs(False, unmet)] if unmet else []
        if system != "kchaos":
            marks.append(pytest.mark.clients)
        params.append(pytest.param(system, marks=marks))
    return params


@pytest.fixture(scope="module", params=systems())
def cluster(request, zookeeper, tmp_path_factory):
    running = new_cluster(request.param, zookeeper.connect,
                          tmp_path_factory.mktemp(f"txn-runs-{request.param}"))
    running.properties.update(BROKER)
    with running:
        yield running


def run(cluster, path, workload: Workload, seconds: float) -> tuple[list, dict[str, Any]]:
    """`seconds` of the workload, then its final phase; the ops and the test record."""
    servers = [b.bootstrap for b in cluster.brokers.values()]
    whole = gen.phases(
        gen.time_limit(seconds, gen.clients(workload.generator)),
        final.final_phase({"f": "heal", "type": "info"}, workload.final_generator,
                          recovery_seconds=0.5, client_seconds=60))
    with HistoryWriter(path) as history:
        interpreter = Interpreter({}, workload.client, history,
                                  concurrency=workload.concurrency, nodes=servers,
                                  op_timeout=workload.op_timeout)
        interpreter.setup_clients()
        worker = threading.Thread(target=interpreter.run, args=(whole,),
                                  kwargs={"time_limit": seconds + 90})
        worker.start()
        worker.join()
        interpreter.teardown_clients()
    test = {"broker_config": BROKER, "final_reads": True, **workload.test_fields}
    return load_history(path), test


def check(ops, test, names) -> dict[str, Any]:
    result = composed([name for name in names if name not in OFFLINE]).check(test, ops, {})
    for name, found in result.checkers.items():
        assert found.valid is True, (name, found.error, found.to_json().get("anomalies"))
    return result.checkers


@pytest.mark.parametrize("client", ["confluent", pytest.param("java", marks=pytest.mark.clients)])
def test_txn_run_with_aborts_is_valid(cluster, tmp_path, client):
    options = QueueOptions(bootstrap_servers=tuple(b.bootstrap for b in cluster.brokers.values()),
                           topic=f"txn-queue-{client}", keys=3, concurrency=4, rate=40, seed=5,
                           op_timeout=5, drain_idle_polls=6, txn=True, abort_rate=0.2,
                           poll_timeout=0.2, client=client,
                           java_runtime=java_runtime() if client == "java" else None)
    ops, test = run(cluster, tmp_path / "history.jsonl", queue_workload(options), 20)
    assert test["txn"] is True and test["isolation_level"] == "read_committed"
    assert test["abort_rate"] == 0.2 and test["idempotence"] is True
    txns = [op for op in ops if op.f == "txn" and op.type != "invoke"]
    kinds = {kind: sum(op.type == kind for op in txns) for kind in ("ok", "fail", "info")}
    assert kinds["ok"] > 50, kinds
    aborted = [op for op in txns if op.extra.get("abort")]
    assert aborted and all(op.type in ("fail", "info") for op in aborted)
    assert sum(op.type == "fail" for op in aborted) > 5
    sends = [m for op in txns if op.type == "ok" for m in op.value if m[0] == "send"]
    assert sends and all(isinstance(m[2][0], int) for m in sends)
    polled = [m for op in txns if op.type == "ok" for m in op.value
              if m[0] == "poll" and any(m[1].values())]
    assert polled, "transactions read what others committed"
    results = check(ops, test, checkers(options))
    assert results["queue"].stats["sends"] > 100


@pytest.mark.parametrize("client", ["confluent", pytest.param("java", marks=pytest.mark.clients)])
def test_transfer_run_is_valid(cluster, tmp_path, client):
    options = TransferOptions(
        bootstrap_servers=tuple(b.bootstrap for b in cluster.brokers.values()),
        topic=f"xfer-in-{client}", output_topic=f"xfer-out-{client}", keys=3, concurrency=4,
        rate=40, seed=9, op_timeout=5, drain_idle_polls=6, abort_rate=0.1, crash_weight=0.02,
        client=client, java_runtime=java_runtime() if client == "java" else None)
    workload = transfer_workload(options)
    ops, test = run(cluster, tmp_path / "history.jsonl", workload, 20)
    assert test["client"] == client
    assert workload.consumer_pids() == []
    transfers = [op for op in ops if op.f == "txn" and op.type == "ok" and "offsets" in op.extra]
    assert len(transfers) > 10
    assert all(m[0] == "send" and m[1] >= options.keys for op in transfers
               for m in op.value[1:])
    [committed] = [op for op in ops if op.f == "committed" and op.type == "ok"]
    assert all(committed.value["offsets"][str(k)] for k in range(options.keys))
    results = check(ops, test, TRANSFER_CHECKERS)
    stats = results["transfer"].stats
    assert stats["inputs"] > 100 and stats["inputs-with-output"] == stats["inputs"]
    assert stats["aborted-on-purpose"] > 0
    assert stats["committed-offsets"] == committed.value["offsets"]


def test_plain_idempotent_run_is_valid(cluster, tmp_path):
    options = QueueOptions(bootstrap_servers=tuple(b.bootstrap for b in cluster.brokers.values()),
                           topic="idempotent", keys=3, concurrency=4, rate=40, seed=3,
                           op_timeout=5, drain_idle_polls=6, idempotence=True)
    assert options.client_options().retries > 0
    ops, test = run(cluster, tmp_path / "history.jsonl", queue_workload(options), 10)
    assert test["idempotence"] is True and test["txn"] is False
    assert not any(op.f == "txn" for op in ops)
    results = check(ops, test, checkers(options))
    assert results["queue"].stats["sends"] > 50
