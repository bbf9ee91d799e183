"""Subscribe mode without a cluster: options, generators, the child's protocol, members."""

from __future__ import annotations

import importlib
import io
import json
import sys
import time

import pytest

from workloads.core import generator as gen
from workloads.core.generator import PENDING, Context
from workloads.groups import ops as group_ops
from workloads.groups.child import ConsumerChild, ConsumerChildren
from workloads.groups.consumer import CommitResult, EventLog, MemberConfig, serve
from workloads.groups.member import GroupMember
from workloads.queue import KIND, QueueOptions, checkers, queue_workload

S = gen.NS_PER_SECOND


def simulate(g, respond, concurrency=2, limit=60, step=1_000_000):
    """Every op completes at once, as `respond(op)` says (a completion dict); time moves
    `step` ns per op. The ops and completions in order."""
    ctx = Context.initial(concurrency, with_nemesis=False)
    events = []
    for _ in range(limit):
        result = gen.op(g, None, ctx)
        if result is None or result is PENDING:
            break
        op, g = result
        ctx = ctx.at(max(ctx.time, op["time"]) + step)
        thread = ctx.thread_of(op["process"])
        ctx = ctx.busy(thread)
        g = gen.update(g, None, ctx, op)
        done = {**op, **respond(op)}
        g = gen.update(g, None, ctx, done)
        ctx = ctx.release(thread, crashed=done["type"] == "info")
        events += [op, done]
    return events


def ok(op):
    return {"type": "ok"}


def reading(op):
    if op["f"] == "poll":
        return {"type": "ok", "value": [["poll", {0: [[4, 40], [5, 50]], "1": [[9, 90]]}]]}
    return {"type": "info" if op["f"] == "crash" else "ok"}


def invokes(events):
    return [e for e in events if e["type"] == "invoke"]


# -- options -----------------------------------------------------------------------------

@pytest.mark.parametrize(("fields", "words"), [
    ({"sub_via": "both"}, ["sub_via", "assign", "subscribe"]),
    ({"commit": "sometimes"}, ["commit", "after-process"]),
    ({"groups": 0}, ["groups", ">= 1"]),
    ({"session_timeout_ms": 10}, ["session_timeout_ms", "1000"]),
    ({"sub_via": "subscribe", "groups": 4, "concurrency": 2}, ["groups", "concurrency"]),
])
def test_group_options_are_validated_with_clear_errors(fields, words):
    with pytest.raises(ValueError) as raised:
        QueueOptions(**fields)
    assert all(word in str(raised.value) for word in words), str(raised.value)


def test_group_options_defaults_fields_and_checkers():
    assign = QueueOptions()
    assert (assign.sub_via, assign.groups, assign.commit, assign.session_timeout_ms) == (
        "assign", 1, "after-process", 6000)
    no_txn = {"txn": False, "isolation_level": "read_committed", "abort_rate": 0.0}
    assert assign.test_fields() == {"acks": "all", "idempotence": False, "subscribe": False,
                                    "client": "confluent", **no_txn}
    assert "groups" not in checkers(assign) and KIND.checkers_for(assign) == KIND.checkers
    subscribe = QueueOptions(sub_via="subscribe", commit="auto", groups=2)
    assert subscribe.test_fields() == {
        "acks": "all", "idempotence": False, "subscribe": True, "client": "confluent",
        **no_txn, "sub_via": "subscribe", "commit": "auto", "groups": 2,
        "session_timeout_ms": 6000, "group_protocol": "classic"}
    assert KIND.checkers_for(subscribe) == (*KIND.checkers, "groups")
    options = subscribe.client_options()
    assert (options.sub_via, options.commit, options.session_timeout_ms) == (
        "subscribe", "auto", 6000)


def test_options_are_declared_for_flags_and_toml():
    from harness.options import declared

    names = {option.name: option for option in declared(QueueOptions)}
    assert names["sub_via"].choices == ("assign", "subscribe")
    assert names["commit"].choices == ("auto", "after-process", "before-process")
    assert names["groups"].kind == "int" and names["session_timeout_ms"].default == 6000


def test_workload_exposes_topic_groups_and_consumer_pids():
    workload = queue_workload(QueueOptions(bootstrap_servers=("b:9092",), sub_via="subscribe",
                                           groups=3, topic="t"))
    assert (workload.topic, workload.groups(), workload.consumer_pids()) == (
        "t", ["g0", "g1", "g2"], [])
    assign = queue_workload(QueueOptions(bootstrap_servers=("b:9092",)))
    assert (assign.groups(), assign.consumer_pids()) == ([], [])


def test_assign_mode_ops_are_unchanged():
    options = QueueOptions(bootstrap_servers=("b",), crash_weight=0.1, seed=3)
    ops = invokes(simulate(queue_workload(options).generator, ok, concurrency=3))
    assert {op["f"] for op in ops} <= {"send", "poll", "assign", "crash"}
    assert not any("group" in op for op in ops)


# -- generators --------------------------------------------------------------------------

def test_a_committed_read_that_raises_fails_and_keeps_its_process():
    from workloads.kafka.client import ClientOptions, QueueClient

    class Unreachable(QueueClient):
        def committed_offsets(self, group):
            raise TimeoutError("no coordinator within 5 s")

    client = Unreachable(ClientOptions(bootstrap_servers=("b:1",), key_partitions={0: 0}))
    done = client.invoke(None, {"f": "committed", "process": 0, "value": {"group": "g0"}})
    assert done["type"] == "fail" and done["value"] == {"group": "g0"}
    assert "no coordinator" in done["error"]


def test_every_process_subscribes_first_in_its_threads_group():
    options = QueueOptions(bootstrap_servers=("b",), sub_via="subscribe", groups=2,
                           concurrency=3, crash_weight=0.2, seed=4)
    events = simulate(queue_workload(options).generator, reading, concurrency=3, limit=200)
    ops = invokes(events)
    assert all(op["group"] == f"g{(op['process'] % 3) % 2}" for op in ops)
    first = {}
    for op in ops:
        first.setdefault(op["process"], op)
    assert all(op["f"] == "subscribe" and op["value"] == {"group": op["group"]}
               for op in first.values())
    crashes = [op for op in ops if op["f"] == "crash"]
    assert crashes and {op["value"] for op in crashes} <= {"close", "abandon"}
    assert {op["process"] for op in crashes} < set(first), "a crashed process starts anew"
    assert not any(op["f"] == "assign" for op in ops)


def test_after_process_commits_what_each_poll_returned_before_the_next_op():
    g = group_ops.GroupOps(gen.limit(4, lambda t, c: {"f": "poll", "value": [["poll"]]}), 1,
                           "after-process")
    ops = invokes(simulate(g, reading, concurrency=1))
    assert [op["f"] for op in ops] == ["subscribe", "poll", "commit", "poll", "commit",
                                       "poll", "commit", "poll", "commit"]
    assert ops[2]["value"] == {"0": 6, "1": 10} and ops[2]["group"] == "g0"


@pytest.mark.parametrize("mode", ["before-process", "auto"])
def test_other_modes_issue_no_commit_ops(mode):
    g = group_ops.GroupOps(gen.limit(3, lambda t, c: {"f": "poll", "value": [["poll"]]}), 1,
                           mode)
    assert [op["f"] for op in invokes(simulate(g, reading, concurrency=1))] == [
        "subscribe", "poll", "poll", "poll"]


def test_pending_commit_outlives_the_wrapped_generator():
    g = group_ops.GroupOps(None, 1, "after-process")
    ctx = Context.initial(1, with_nemesis=False)
    poll = {"f": "poll", "type": "ok", "process": 0, "value": [["poll", {"2": [[7, 1]]}]]}
    g = g.update(None, ctx, poll)
    op, g = g.op(None, ctx)
    assert (op["f"], op["value"]) == ("commit", {"2": 8})
    assert g.update(None, ctx.busy(0), op).op(None, ctx.busy(0)) is PENDING
    assert g.update(None, ctx, op).op(None, ctx) is None


def test_final_polls_until_idle_for_polls_and_time():
    g = group_ops.FinalPolls(idle_polls=2, idle_ns=S)
    ctx = Context.initial(1, with_nemesis=False)
    empty = {"f": "poll", "type": "ok", "final": True, "process": 0, "value": [["poll", {}]]}
    full = {**empty, "value": [["poll", {0: [[1, 1]]}]]}
    op, _ = g.op(None, ctx)
    assert op["final"] is True and op["f"] == "poll"
    g = g.update(None, ctx, {**empty, "final": None})
    g = g.update(None, ctx, empty).update(None, ctx, empty)
    assert g.op(None, ctx) is not None, "idle polls, but not for long enough"
    assert g.op(None, ctx.at(S)) is None
    g = g.update(None, ctx.at(S), full)
    assert g.op(None, ctx.at(2 * S)) is not None


def test_final_phase_polls_closes_reads_committed_then_drains():
    final = group_ops.final_generator([0, 1], 2, "after-process", 2, 0)
    responses = iter([True, False, True])

    def respond(op):
        if op["f"] == "crash":
            return {"type": "info"}
        if op["f"] == "poll" and op.get("final") and next(responses, None):
            return {"type": "ok", "value": [["poll", {0: [[0, 5]]}]]}
        return {"type": "ok", "value": [["poll", {}]]} if op["f"] == "poll" else {"type": "ok"}

    events = simulate(gen.clients(final), respond, concurrency=2, limit=100, step=S // 4)
    ops = invokes(events)
    fs = [op["f"] for op in ops]
    closes = [i for i, op in enumerate(ops) if op["f"] == "crash" and op["value"] == "close"]
    committed = [op for op in ops if op["f"] == "committed"]
    assert fs[:2] == ["subscribe", "subscribe"] and len(closes) == 2
    assert all(ops[i]["group"] for i in closes)
    assert [op["value"] for op in committed] == [{"group": "g0"}, {"group": "g1"}]
    assert all(op["group"] == op["value"]["group"] for op in committed)
    assert max(closes) < fs.index("committed") < fs.index("assign")
    assert all(op.get("final") for op in ops[:closes[0]] if op["f"] == "poll")
    assert fs[:closes[0]].count("commit") == 2, "records polled, then committed"
    drain = ops[fs.index("assign"):]
    assert drain and not any("group" in op for op in drain)


# -- the child's protocol ------------------------------------------------------------------

class FakeBackend:
    def __init__(self, commit_type="ok"):
        self.events = EventLog()
        self.commit_type = commit_type
        self.commits = []

    def subscribe(self):
        self.events.record(generation=3, member="m", assigned=[1, 0])
        self.events.record(generation=3, member="m")

    def fetch(self):
        return {0: [[5, 50], [6, 60]]}, []

    def commit(self, offsets):
        self.commits.append(dict(offsets))
        return CommitResult(self.commit_type, None if self.commit_type == "ok" else "X")

    def close(self):
        self.events.record(generation=3, member="m", revoked=[0, 1])


def config(commit="after-process"):
    return MemberConfig(bootstrap_servers=("b",), topic="t", group="g0",
                        partition_keys={0: 0, 1: 1}, commit=commit)


def talk(backend, commit, *requests):
    replies = io.StringIO()
    serve(backend, config(commit),
          io.StringIO("".join(json.dumps(r) + "\n" for r in requests)), replies)
    return [json.loads(line) for line in replies.getvalue().splitlines()]


def test_child_answers_with_the_callbacks_that_ran_and_stops_at_close():
    backend = FakeBackend()
    replies = talk(backend, "after-process", {"id": 1, "op": "subscribe"},
                   {"id": 2, "op": "commit", "offsets": [[0, 7]]}, {"id": 3, "op": "close"},
                   {"id": 4, "op": "poll"})
    assert [r["id"] for r in replies] == [1, 2, 3]
    assert [(e["assigned"], e["generation"], e["member"]) for e in replies[0]["events"]] == [
        ([0, 1], 3, "m")], "a callback of no keys is left out"
    assert replies[1] == {"id": 2, "result": {"type": "ok", "error": None}, "events": []}
    assert backend.commits == [{0: 7}]
    assert replies[2]["events"][0]["revoked"] == [0, 1]


def test_before_process_poll_commits_first_and_drops_records_on_failure():
    good = talk(FakeBackend(), "before-process", {"id": 1, "op": "poll"})[0]["result"]
    assert good["reads"] == [[0, [[5, 50], [6, 60]]]]
    assert good["commit"]["offsets"] == [[0, 7]] and good["commit"]["type"] == "ok"
    bad = talk(FakeBackend("info"), "before-process", {"id": 1, "op": "poll"})[0]["result"]
    assert bad["reads"] == [] and bad["unprocessed"] == [[0, [5, 6]]]
    assert bad["commit"]["type"] == "info"
    plain = talk(FakeBackend(), "after-process", {"id": 1, "op": "poll"})[0]["result"]
    assert "commit" not in plain


class FakeChild:
    def __init__(self, replies):
        self.replies = replies
        self.pid = 1234
        self.killed = False

    def request(self, op, timeout, **fields):
        reply = self.replies[op]
        if isinstance(reply, Exception):
            raise reply
        return reply

    def kill(self):
        self.killed = True

    def close(self, timeout):
        return self.replies["close"]


class FakeChildren(ConsumerChildren):
    def __init__(self, child):
        super().__init__()
        self.child = child

    def start(self, config, main):
        return self.child


def member(replies, clock=None):
    return GroupMember(FakeChildren(FakeChild(replies)), config("before-process"), clock,
                       "workloads.kafka.confluent_member")


def test_member_completions_carry_rebalances_on_the_history_clock():
    now = time.monotonic_ns()
    event = {"time": now, "generation": None, "member": "m", "assigned": [0], "revoked": [],
             "lost": False}
    poll = {"result": {"reads": [[0, [[5, 50]]]], "errors": [],
                       "commit": {"offsets": [[0, 6]], "type": "ok", "time": now,
                                  "error": None}}, "events": [event]}
    group = member({"poll": poll, "subscribe": {"result": None, "events": []}},
                   clock=lambda: time.monotonic_ns() - now + 5 * S)
    op = {"f": "poll", "process": 0, "value": [["poll"]], "group": "g0"}
    done = group.poll(op)
    assert done["type"] == "ok" and done["value"] == [["poll", {0: [[5, 50]]}]]
    entry = done["rebalances"][0]
    assert entry["group"] == "g0" and entry["assigned"] == [0]
    assert 5 * S <= entry["time"] < 6 * S
    assert done["commit"]["offsets"] == {"0": 6} and done["commit"]["type"] == "ok"
    sub = group.subscribe({"f": "subscribe", "process": 0, "value": {"group": "g0"}})
    assert sub["type"] == "ok" and "rebalances" not in sub


def test_member_timeout_is_info_and_abandon_kills_the_child():
    group = member({"poll": TimeoutError("no answer"), "close": None})
    done = group.poll({"f": "poll", "process": 0, "value": [["poll"]]})
    assert done["type"] == "info" and "no answer" in done["error"]
    child = group.child
    crash = group.crash({"f": "crash", "process": 0, "value": "abandon"})
    assert crash["type"] == "info" and child.killed and group.child is None


def test_member_commit_outcome_and_close_crash_rebalances():
    revoke = {"time": time.monotonic_ns(), "generation": None, "member": "m", "assigned": [],
              "revoked": [0], "lost": False}
    group = member({"commit": {"result": {"type": "fail", "error": "ILLEGAL_GENERATION"},
                               "events": []},
                    "close": {"result": None, "events": [revoke]}})
    done = group.commit({"f": "commit", "process": 0, "value": {"0": 6}})
    assert (done["type"], done["value"], done["error"]) == ("fail", {"0": 6},
                                                            "ILLEGAL_GENERATION")
    crash = group.crash({"f": "crash", "process": 0, "value": "close"})
    assert crash["type"] == "info" and crash["rebalances"][0]["revoked"] == [0]


SLOW_CHILD = """
import json, sys, time
sys.stdin.readline()
for line in sys.stdin:
    request = json.loads(line)
    if request["op"] == "slow":
        time.sleep(1.0)
    event = {"time": time.monotonic_ns(), "assigned": [request["op"]]}
    print(json.dumps({"id": request["id"], "result": None, "events": [event]}), flush=True)
"""


def test_the_events_of_a_reply_that_came_too_late_go_with_the_next_one():
    child = ConsumerChild(config(), [sys.executable, "-c", SLOW_CHILD])
    try:
        with pytest.raises(TimeoutError):
            child.request("slow", 0.2)
        reply = child.request("fast", 10)
        assert [event["assigned"] for event in reply["events"]] == [["slow"], ["fast"]]
        assert child.request("again", 10)["events"][0]["assigned"] == ["again"]
    finally:
        child.kill()


def test_every_child_entry_point_is_a_module_with_a_main():
    from workloads.kafka.confluent import TRANSFER_MAIN, ConfluentClient
    from workloads.kafka.kafka_python import KafkaPythonClient

    for main in (ConfluentClient.member_main, KafkaPythonClient.member_main, TRANSFER_MAIN):
        assert callable(importlib.import_module(main).main), main


def test_an_adapter_makes_its_members_configuration():
    from workloads.kafka.client import ClientOptions
    from workloads.kafka.kafka_python import KafkaPythonClient

    client = KafkaPythonClient(ClientOptions(bootstrap_servers=("a:1", "b:2"),
                                             key_partitions={0: 0, 1: 1}), node="b:2")
    member = client.member_config("g1")
    assert member.group == "g1" and member.bootstrap_servers == ("b:2", "a:1")
    assert MemberConfig.from_json(member.to_json()) == member
