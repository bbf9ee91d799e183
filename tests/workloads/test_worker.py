"""The interpreter with an in-memory queue client and a fake nemesis (no cluster)."""

from __future__ import annotations

import time

import pytest

from checker.history import load_history
from checker.queue.analysis import QueueChecker
from tests.support.memory_queue import MemoryClient, MemoryLog
from workloads.core import final
from workloads.core import generator as gen
from workloads.core.worker import Interpreter
from workloads.queue import QueueOptions, queue_workload

pytestmark = pytest.mark.timeout(60)


class FakeNemesis:
    def __init__(self) -> None:
        self.ops = []

    def invoke(self, test, op):
        self.ops.append(op["f"])
        return {**op, "value": {"n1": "killed"} if op["f"] == "kill" else "healed"}


def test_queue_workload_in_memory_is_valid(tmp_path):
    from checker.history import HistoryWriter

    options = QueueOptions(bootstrap_servers=("a", "b"), keys=3, concurrency=3, rate=300,
                           crash_weight=0.05, seed=5)
    log = MemoryLog()
    workload = queue_workload(options, factory=lambda name, o: MemoryClient(log, 3))
    nemesis = FakeNemesis()
    schedule = gen.nemesis({"f": "kill", "type": "info", "value": "one",
                            "time": gen.NS_PER_SECOND})
    main = gen.time_limit(2, gen.any_of(gen.clients(workload.generator), schedule))
    whole = gen.phases(main, final.final_phase({"f": "heal", "type": "info"},
                                             workload.final_generator, recovery_seconds=0.1))
    path = tmp_path / "history.jsonl"
    with HistoryWriter(path) as history:
        interpreter = Interpreter({}, workload.client, history, concurrency=3, nemesis=nemesis,
                                  nodes=["a", "b"], op_timeout=1)
        interpreter.run(whole, time_limit=30)
        progress = interpreter.progress.snapshot()
    ops = load_history(path)
    assert nemesis.ops == ["kill", "heal"]
    kills = [op for op in ops if op.f == "kill"]
    assert [op.type for op in kills] == ["info", "info"]
    assert kills[1].value == {"n1": "killed"} and kills[0].process == "nemesis"
    assert kills[0].time >= gen.NS_PER_SECOND
    fs = {op.f for op in ops}
    assert {"send", "poll", "assign", "crash", "heal"} <= fs
    crashed = {op.process for op in ops if op.f == "crash"}
    assert crashed and all(any(o.process == p + 3 for o in ops) for p in crashed
                           if any(o.f != "crash" for o in ops if o.process == p))
    sends = [op for op in ops if op.f == "send" and op.type == "ok"]
    # The rate caps the ops (600 in 2 s); how many the machine manages depends on its load.
    assert 50 < len(sends) + progress["fail"] + progress["info"] < 1000
    assert progress["ok"] == sum(1 for op in ops if op.type == "ok")
    assert progress["faults"] == {}
    result = QueueChecker().check({"acks": "all"}, ops, {})
    assert result.valid is True, result.anomalies
    assert result.stats["reads-without-send"] == 0
    assert final.FINAL_READS_DONE in interpreter.marks, "the drain ran to its end"


def test_a_drain_cut_short_by_its_bound_leaves_no_mark(tmp_path):
    """The runner records `final_reads` false then: unseen writes are not judged lost."""
    from checker.history import HistoryWriter

    endless = gen.clients(lambda test, ctx: {"f": "poll", "value": [["poll"]]})
    whole = final.final_phase({"f": "heal", "type": "info"}, endless, recovery_seconds=0,
                              client_seconds=0.5)
    log = MemoryLog()
    with HistoryWriter(tmp_path / "history.jsonl") as history:
        interpreter = Interpreter({}, MemoryClient(log, 1), history, concurrency=1,
                                  nemesis=FakeNemesis(), op_timeout=1)
        interpreter.run(whole, time_limit=10)
    assert final.FINAL_READS_DONE not in interpreter.marks
    assert "sleep" in interpreter.marks, "the recovery wait ran"


def run_ops(tmp_path, ops, op_timeout=0.5, concurrency=1):
    from checker.history import HistoryWriter

    opened = []
    client = MemoryClient(MemoryLog(), 1, opened)
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as history:
        interpreter = Interpreter({}, client, history, concurrency=concurrency,
                                  op_timeout=op_timeout)
        interpreter.run(gen.clients(ops), time_limit=20)
    return load_history(path), opened, interpreter.progress.snapshot()


def test_exception_timeout_and_invalid_completion_become_info_with_new_process(tmp_path):
    ops, opened, progress = run_ops(tmp_path, [
        {"f": "poll", "value": [["poll"]]}, {"f": "explode"}, {"f": "poll", "value": [["poll"]]},
        {"f": "hang"}, {"f": "bad"}, {"f": "poll", "value": [["poll"]]}])
    completions = [(op.process, op.f, op.type, op.extra.get("error", "")[:13])
                   for op in ops if op.type != "invoke"]
    assert completions == [
        (0, "poll", "ok", ""), (0, "explode", "info", "indeterminate"),
        (1, "poll", "ok", ""), (1, "hang", "info", "timeout: no a"),
        (2, "bad", "info", "indeterminate"), (3, "poll", "ok", "")]
    assert len(opened) == 4, "a fresh client for every new process"
    assert (progress["ok"], progress["info"], progress["fail"]) == (3, 3, 0)


def test_crash_op_reopens_client_as_new_process(tmp_path):
    ops, opened, _ = run_ops(tmp_path, [{"f": "crash"}, {"f": "poll", "value": [["poll"]]}])
    assert [(op.process, op.f, op.type) for op in ops] == [
        (0, "crash", "invoke"), (0, "crash", "info"), (1, "poll", "invoke"), (1, "poll", "ok")]
    assert len(opened) == 2


def test_client_that_cannot_open_fails_the_op(tmp_path):
    from checker.history import HistoryWriter

    class Unopenable:
        def open(self, test, node):
            raise ConnectionError("no route")

    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as history:
        Interpreter({}, Unopenable(), history, concurrency=1).run(
            gen.clients({"f": "poll", "value": [["poll"]]}))
    ops = load_history(path)
    assert [op.type for op in ops] == ["invoke", "fail"]
    assert "no client" in ops[1].extra["error"]


def test_time_limit_bounds_the_run(tmp_path):
    from checker.history import HistoryWriter

    path = tmp_path / "h2.jsonl"
    with HistoryWriter(path) as history:
        started = time.monotonic()
        Interpreter({}, MemoryClient(MemoryLog(), 1), history, concurrency=2).run(
            gen.clients(gen.delay(0.01, gen.repeat({"f": "poll", "value": [["poll"]]}))),
            time_limit=1)
    assert time.monotonic() - started < 3
    assert 50 < len(load_history(path)) < 250


def test_progress_tracks_current_faults():
    from workloads.core.worker import Progress

    progress = Progress()
    progress.nemesis({"f": "start-partition", "value": {"n1": ["n2"]}})
    progress.nemesis({"f": "kill", "value": {"n3": "killed"}})
    assert set(progress.snapshot()["faults"]) == {"start-partition", "kill"}
    progress.nemesis({"f": "stop-partition"})
    assert set(progress.snapshot()["faults"]) == {"kill"}
    progress.nemesis({"f": "heal"})
    assert progress.snapshot()["faults"] == {}


def test_progress_shows_only_faults_that_took_effect():
    """A fault that found nothing to act on is not acting; a paused consumer is."""
    from workloads.core.worker import Progress

    progress = Progress()
    progress.nemesis({"f": "kill", "value": "no-target", "fault": "kill-coordinator"})
    progress.nemesis({"f": "start-partition", "value": {"skipped": "no groups"}})
    progress.nemesis({"f": "pause", "value": "one", "error": "RuntimeError: boom"})
    assert progress.snapshot()["faults"] == {}
    progress.nemesis({"f": "start-pause-consumers", "value": {"paused": [42], "seconds": 8},
                      "fault": "pause-consumers"})
    assert set(progress.snapshot()["faults"]) == {"start-pause-consumers"}
    progress.nemesis({"f": "stop-pause-consumers", "value": {"resumed": [42]}})
    assert progress.snapshot()["faults"] == {}


def test_nemesis_package_schedule_runs_at_its_times(tmp_path):
    """A nemesis package's Schedule (ops carrying their start times) under `gen.nemesis`."""
    from checker.history import HistoryWriter
    from nemesis.package import Schedule

    schedule = Schedule(({"type": "info", "process": "nemesis", "f": "kill", "value": "one",
                          "time": gen.NS_PER_SECOND // 2},
                         {"type": "info", "process": "nemesis", "f": "start", "value": None,
                          "time": gen.NS_PER_SECOND}))
    nemesis = FakeNemesis()
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as history:
        interpreter = Interpreter({}, MemoryClient(MemoryLog(), 1), history, concurrency=1,
                                  nemesis=nemesis)
        interpreter.run(gen.any_of(
            gen.nemesis(schedule),
            gen.clients(gen.time_limit(1.5, gen.delay(0.1, gen.repeat(
                {"f": "poll", "value": [["poll"]]}))))))
    ops = load_history(path)
    nemesis_ops = [op for op in ops if op.process == "nemesis"]
    assert [(op.f, op.type) for op in nemesis_ops] == [
        ("kill", "info"), ("kill", "info"), ("start", "info"), ("start", "info")]
    assert nemesis_ops[0].time >= gen.NS_PER_SECOND // 2
    assert nemesis_ops[2].time >= gen.NS_PER_SECOND
    assert nemesis.ops == ["kill", "start"]
    assert 10 <= sum(1 for op in ops if op.f == "poll" and op.type == "ok") <= 16


class SlowNemesis(FakeNemesis):
    """Takes `seconds` to kill, as a targeted fault waits for the cluster."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self.seconds = seconds

    def invoke(self, test, op):
        if op["f"] == "kill":
            time.sleep(self.seconds)
        return super().invoke(test, op)


def test_a_slow_nemesis_op_delays_the_staggered_ops_after_it(tmp_path):
    """Under the interpreter the stop comes its hold after the slow start completed, and
    the next start its wait after that; a start due past the time limit never runs."""
    from checker.history import HistoryWriter
    from nemesis.package import Staggered, Step

    steps = (Step("kill", "one", 0.1, 0.3), Step("kill", "one", 0.2, 0.3),
             Step("kill", "one", 5.0, 0.1))
    nemesis = SlowNemesis(0.5)
    path = tmp_path / "h.jsonl"
    with HistoryWriter(path) as history:
        interpreter = Interpreter({}, MemoryClient(MemoryLog(), 1), history, concurrency=1,
                                  nemesis=nemesis)
        interpreter.run(gen.time_limit(3.0, gen.any_of(
            gen.nemesis(Staggered(steps, 3 * gen.NS_PER_SECOND)),
            gen.clients(gen.delay(0.1, gen.repeat({"f": "poll", "value": [["poll"]]}))))))
    ops = [op for op in load_history(path) if op.process == "nemesis"]
    assert [op.f for op in ops] == ["kill"] * 2 + ["start"] * 2 + ["kill"] * 2 + ["start"] * 2
    seconds = [op.time / gen.NS_PER_SECOND for op in ops]
    killed, stopped, started_again = seconds[1], seconds[2], seconds[4]
    assert killed - seconds[0] >= 0.5
    assert 0.3 <= stopped - killed < 0.5
    assert 0.2 <= started_again - seconds[3] < 0.4
    assert nemesis.ops == ["kill", "start", "kill", "start"]
