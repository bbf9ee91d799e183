"""`run_test` with every part faked but the checkers and Spark: a fake db on the fake remote,
an in-memory queue workload, real nemeses acting on the fake cluster. No root, no cluster."""

from __future__ import annotations

import io
import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from checker.history import load_history
from checker.registry import composed
from harness import exit_codes
from harness.runner import check_run, run_test
from harness.store import read_test
from harness.test import Test, WorkloadPart
from nemesis.package import package
from tests.support.fake_cluster import FakeCluster
from tests.support.memory_queue import MemoryClient, MemoryLog
from workloads.core.client import completed
from workloads.core.part import WorkloadKind
from workloads.groups.child import ConsumerChildren
from workloads.groups.consumer import MemberConfig
from workloads.queue import QueueOptions, queue_workload

pytestmark = [pytest.mark.spark, pytest.mark.timeout(300)]

KEYS = 3


class FakeRunningDB(FakeCluster):
    """FakeCluster (what nemeses act on) plus what the runner asks of a running db."""

    def __init__(self, events: list[str]) -> None:
        super().__init__()
        self.events = events
        self.prefix = "kcfake"
        self.bootstrap_servers = ",".join(f"{node}:9092" for node in self.brokers)

    def facts(self):
        return {"node_broker_ids": {n: self.broker_id(n) for n in self.brokers},
                "bootstrap_servers": self.bootstrap_servers, "cluster_prefix": self.prefix}

    def processes(self):
        return {"prefix": self.prefix}

    def collect_logs(self, dest: Path) -> list[Path]:
        target = dest / "n1" / "server.log"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text("broker log\n")
        self.events.append("logs")
        return [target]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.events.append("down")


@dataclass(frozen=True)
class FakeDB:
    events: list
    fail_start: bool = False
    name: str = "fake"

    def start(self, logs_dest=None, timeout: float = 60.0) -> FakeRunningDB:
        self.events.append("start")
        if self.fail_start:
            raise RuntimeError("broker on n1 exited")
        return FakeRunningDB(self.events)

    def describe(self):
        return {"db": self.name, "broker_config": {"min.insync.replicas": "2"}}


class LosingClient(MemoryClient):
    """Acknowledges value 7 at the log's next offset without writing it: the next write
    takes that offset, so an acknowledged write is lost."""

    def invoke(self, test, op):
        if op["f"] == "send" and op["value"][0][2] == 7:
            _, key, value = op["value"][0]
            with self.log.lock:
                offset = len(self.log.logs.setdefault(key, []))
            return completed(op, "ok", [["send", key, [offset, value]]])
        return super().invoke(test, op)


def memory_workload(client_class=MemoryClient) -> WorkloadPart:
    log = MemoryLog()

    def build(options, context):
        options = replace(options, bootstrap_servers=context.bootstrap_servers,
                          seed=context.seed, crash_weight=0.02)
        return queue_workload(options, factory=lambda name, o: client_class(log, KEYS))

    options = QueueOptions(keys=KEYS, concurrency=3, rate=200)
    return WorkloadPart("memory", WorkloadKind(QueueOptions, build, ("queue", "acks")), options)


def fake_test(tmp_path: Path, events: list, **changes) -> Test:
    test = Test(name="fake", seed=7, time_limit=3.0, store=tmp_path / "store", nodes=5,
                db=FakeDB(events), workload=memory_workload(),
                nemesis=package("kill,pause", seed=7, time_limit=3.0, interval=0.5),
                checker=composed(["queue", "acks"]), recovery_seconds=0.2,
                final_read_seconds=10.0, spark_master="local[2]")
    return replace(test, **changes)


def test_a_small_run_without_a_master_is_checked_in_process_without_spark(tmp_path):
    outcome = run_test(fake_test(tmp_path, [], spark_master=None), out=io.StringIO())
    assert outcome.exit_code == exit_codes.VALID
    assert (outcome.run_dir / "results.json").is_file()
    assert not (outcome.run_dir / "spark.log").exists(), "Spark started for a small history"


def test_a_run_of_fake_parts_is_stored_checked_and_reported(spark, tmp_path):
    events: list[str] = []
    out = io.StringIO()
    test = fake_test(tmp_path, events)
    outcome = run_test(test, out=out)
    printed = out.getvalue()
    assert outcome.exit_code == exit_codes.VALID, printed
    assert events == ["start", "logs", "down"]
    assert test.nemesis.consumers.topic == "kchaos"  # the runner handed the workload over
    run = outcome.run_dir
    recorded = json.loads((run / "test.json").read_text())
    assert "start_wall_ms" not in recorded and "final_reads" not in recorded, \
        "test.json is the configuration, written once; progress is progress.json's"
    test = read_test(run)
    assert test["db"] == "fake" and test["workload"] == "memory" and test["seed"] == 7
    assert test["checkers"] == ["queue", "acks"] and test["cluster_prefix"] == "kcfake"
    assert test["acks"] == "all" and "start_wall_ms" in test and test["final_reads"] is True
    ops = load_history(run / "history.jsonl")
    assert any(op.process == "nemesis" and op.f in ("kill", "pause") for op in ops)
    assert [op.f for op in ops if op.process == "nemesis"][-1] == "heal"
    results = json.loads((run / "results.json").read_text())
    assert results["valid"] is True and set(results["checkers"]) == {"queue", "acks"}
    assert (run / "report.html").is_file() and (run / "nodes" / "n1" / "server.log").is_file()
    assert "kchaos: VALID" in printed


def test_a_lost_acknowledged_write_is_invalid_and_check_run_agrees(spark, tmp_path):
    events: list[str] = []
    test = fake_test(tmp_path, events, workload=memory_workload(LosingClient))
    outcome = run_test(test, out=io.StringIO())
    assert outcome.exit_code == exit_codes.INVALID
    queue = outcome.results.checkers["queue"]
    assert "lost-write" in queue.anomalies
    again = check_run(outcome.run_dir, "local[2]", out=io.StringIO())
    assert again.exit_code == exit_codes.INVALID
    assert set(again.results.checkers) == {"queue", "acks"}


def test_a_db_that_does_not_start_is_a_harness_error_and_leaves_the_record(spark, tmp_path):
    events: list[str] = []
    out = io.StringIO()
    outcome = run_test(fake_test(tmp_path, events, db=FakeDB(events, fail_start=True)), out=out)
    assert outcome.exit_code == exit_codes.ERROR and outcome.results is None
    assert "harness error: broker on n1 exited" in out.getvalue()
    assert json.loads((outcome.run_dir / "test.json").read_text())["db"] == "fake"
    assert events == ["start"]


def test_an_interrupt_tears_the_db_down(spark, tmp_path):
    events: list[str] = []

    def interrupted(options, context):
        raise KeyboardInterrupt

    workload = WorkloadPart("memory", WorkloadKind(QueueOptions, interrupted, ("queue",)),
                            QueueOptions())
    out = io.StringIO()
    outcome = run_test(fake_test(tmp_path, events, workload=workload), out=out)
    assert outcome.exit_code == exit_codes.ERROR
    assert events == ["start", "logs", "down"]
    assert "interrupted; everything torn down" in out.getvalue()
    assert read_test(outcome.run_dir)["final_reads"] is False


def test_check_of_a_malformed_history_exits_3_and_leaves_no_current_looking_results(
        spark, tmp_path):
    outcome = run_test(fake_test(tmp_path, []), out=io.StringIO())
    run = outcome.run_dir
    history = run / "history.jsonl"
    lines = history.read_text().splitlines()
    lines[5] = '{"index": 5, "time": 1, "type": "weird"'
    history.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    again = check_run(run, "local[2]", out=out)
    assert again.exit_code == exit_codes.ERROR and again.results is None
    assert out.getvalue().startswith(f"kchaos: {history}:6: invalid JSON")
    assert "checked" not in out.getvalue()
    assert not (run / "results.json").exists()
    report = (run / "report.html").read_text()
    assert "cannot be read" in report and "VALID" not in report.replace("INVALID", "")


def test_a_run_without_its_check_stores_the_history_and_logs_only(tmp_path):
    events: list[str] = []
    out = io.StringIO()
    outcome = run_test(fake_test(tmp_path, events, check=False), out=out)
    run = outcome.run_dir
    assert outcome.exit_code == exit_codes.VALID and outcome.results is None
    assert events == ["start", "logs", "down"]
    assert load_history(run / "history.jsonl") and (run / "nodes" / "n1" / "server.log").is_file()
    assert read_test(run)["final_reads"] is True
    assert not (run / "results.json").exists() and not (run / "report.html").exists()
    assert "not checked (no_check" in out.getvalue()


class ChildClient(MemoryClient):
    """A memory client whose first ops start real consumer children (a group member of
    confluent-kafka pointed at a loopback port nothing listens on), as a subscribe-mode
    client does (each worker may start one); its teardown kills them, as
    `QueueClient.teardown` does."""

    children = ConsumerChildren()
    started: list[int] = []

    def invoke(self, test, op):
        if not self.started:
            config = MemberConfig(bootstrap_servers=("127.0.0.1:1",), topic="kchaos",
                                  group="g0", partition_keys={0: 0})
            child = self.children.start(config, "workloads.kafka.confluent_member")
            self.started.append(child.pid)
            child.request("poll", 30)  # it runs and answers
        return super().invoke(test, op)

    def teardown(self, test):
        self.children.kill_all()


def test_an_error_in_the_client_phase_leaves_no_client_child_process(tmp_path):
    calls = []

    def exploding(test, ctx):
        calls.append(ctx)
        if len(calls) > 20:
            raise RuntimeError("the generator exploded")
        return {"f": "send", "value": [["send", 0, len(calls)]]}

    def build(options, context):
        built = memory_workload(ChildClient).kind.build(options, context)
        return replace(built, generator=exploding)

    ChildClient.started.clear()
    workload = WorkloadPart("memory", WorkloadKind(QueueOptions, build, ("queue",)),
                            QueueOptions(keys=KEYS, concurrency=3, rate=200))
    events: list[str] = []
    out = io.StringIO()
    outcome = run_test(fake_test(tmp_path, events, workload=workload, check=False), out=out)
    assert outcome.exit_code == exit_codes.ERROR
    assert "harness error: the generator exploded" in out.getvalue()
    assert events == ["start", "logs", "down"]
    assert ChildClient.started, "no consumer child started"
    for pid in ChildClient.started:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
