"""Pure generator tests: op sequences from contexts, no cluster."""

from __future__ import annotations

import pytest

from workloads.core import final
from workloads.core import generator as gen
from workloads.core.generator import PENDING, Context

S = gen.NS_PER_SECOND


def run(g, concurrency=2, *, limit=100, with_nemesis=True, complete=True, step=0,
        crash_fs=()):
    """Simulate an interpreter: every op completes (ok, or info for `crash_fs`) at once;
    time jumps to each op's time. Returns the ops in order."""
    ctx = Context.initial(concurrency, with_nemesis=with_nemesis)
    ops = []
    for _ in range(limit):
        result = gen.op(g, None, ctx)
        if result is None:
            break
        if result is PENDING:
            assert not complete, "a simulation that completes every op never waits"
            break
        op, g = result
        ops.append(op)
        ctx = ctx.at(max(ctx.time, op["time"]) + step)
        thread = ctx.thread_of(op["process"])
        ctx = ctx.busy(thread)
        g = gen.update(g, None, ctx, op)
        if complete:
            kind = "info" if op["f"] in crash_fs else "ok"
            done = {**op, "type": kind}
            g = gen.update(g, None, ctx, done)
            ctx = ctx.release(thread, crashed=kind == "info")
    return ops


def fs(ops):
    return [op["f"] for op in ops]


def test_dict_is_one_op_filled_in():
    ops = run({"f": "read"})
    assert ops == [{"f": "read", "type": "invoke", "time": 0, "process": 0}]


def test_function_is_endless_and_sequence_runs_in_order():
    counter = iter(range(1000))
    ops = run([gen.limit(3, lambda t, c: {"f": "a", "value": next(counter)}), {"f": "b"}])
    assert fs(ops) == ["a", "a", "a", "b"]
    assert [op["value"] for op in ops[:3]] == [0, 1, 2]


def test_pending_when_no_free_thread():
    ctx = Context.initial(1, with_nemesis=False).busy(0)
    assert gen.op({"f": "x"}, None, ctx) is PENDING
    assert gen.op(gen.clients({"f": "x"}), None, Context.initial(1).busy(0)) is PENDING


def test_mix_is_seeded_and_uses_every_generator():
    g = gen.mix([gen.repeat({"f": "a"}), gen.repeat({"f": "b"})], seed=7)
    first, second = fs(run(gen.limit(50, g))), fs(run(gen.limit(50, g)))
    assert first == second
    assert set(first) == {"a", "b"}
    other = fs(run(gen.limit(50, gen.mix([gen.repeat({"f": "a"}), gen.repeat({"f": "b"})], 8))))
    assert other != first


def test_mix_weights_and_exhaustion():
    g = gen.mix([gen.repeat({"f": "a"}), gen.limit(2, gen.repeat({"f": "b"}))], 1, [1, 100])
    ops = fs(run(gen.limit(20, g)))
    assert ops.count("b") == 2 and ops.count("a") == 18


def test_stagger_spaces_ops_by_mean_interval():
    ops = run(gen.limit(400, gen.stagger(0.01, gen.repeat({"f": "a"}), seed=3)))
    times = [op["time"] for op in ops]
    assert times == sorted(times)
    mean_gap = (times[-1] - times[0]) / (len(times) - 1)
    assert 0.008 * S < mean_gap < 0.012 * S
    again = run(gen.limit(400, gen.stagger(0.01, gen.repeat({"f": "a"}), seed=3)))
    assert [op["time"] for op in again] == times


def test_delay_is_exact():
    ops = run(gen.limit(4, gen.delay(2, gen.repeat({"f": "a"}))))
    assert [op["time"] for op in ops] == [0, 2 * S, 4 * S, 6 * S]


def test_time_limit_stops_at_cutoff():
    ops = run(gen.time_limit(5, gen.delay(1, gen.repeat({"f": "a"}))))
    assert [op["time"] for op in ops] == [i * S for i in range(5)]


def test_time_limit_ends_even_when_pending():
    g = gen.time_limit(1, gen.repeat({"f": "a"}))
    ctx = Context.initial(1, with_nemesis=False)
    op, g = gen.op(g, None, ctx)
    busy = ctx.busy(0)
    assert gen.op(g, None, busy.at(S // 2)) is PENDING
    assert gen.op(g, None, busy.at(2 * S)) is None


def test_once_limit_repeat():
    assert fs(run(gen.once(gen.repeat({"f": "a"})))) == ["a"]
    assert fs(run(gen.repeat({"f": "a"}, 3))) == ["a", "a", "a"]
    assert fs(run(gen.limit(2, [{"f": "a"}, {"f": "b"}, {"f": "c"}]))) == ["a", "b"]


def test_phases_wait_for_every_thread():
    g = gen.phases(gen.repeat({"f": "a"}, 2), {"f": "b"})
    ctx = Context.initial(2, with_nemesis=False)
    op1, g = gen.op(g, None, ctx)
    ctx = ctx.busy(ctx.thread_of(op1["process"]))
    op2, g = gen.op(g, None, ctx)
    ctx = ctx.busy(ctx.thread_of(op2["process"]))
    assert {op1["process"], op2["process"]} == {0, 1}
    ctx = ctx.release(0)
    assert gen.op(g, None, ctx) is PENDING, "phase b waits for thread 1"
    ctx = ctx.release(1)
    op3, g = gen.op(g, None, ctx)
    assert op3["f"] == "b"


def test_clients_and_nemesis_routing_with_any():
    g = gen.any_of(gen.clients(gen.limit(3, gen.repeat({"f": "read"}))),
                   gen.nemesis([{"f": "start-partition", "type": "info"},
                                {"f": "stop-partition", "type": "info"}]))
    ops = run(g, concurrency=2, complete=False)
    by_f = {op["f"]: op["process"] for op in ops}
    assert by_f["start-partition"] == "nemesis"
    assert {op["process"] for op in ops if op["f"] == "read"} <= {0, 1}
    assert fs(ops).count("read") == 2, "two client threads, never completed"


def test_any_picks_the_soonest():
    later = gen.nemesis({"f": "kill", "type": "info", "time": 5 * S})
    g = gen.any_of(later, gen.clients(gen.delay(1, gen.repeat({"f": "read"}, 7))))
    ops = run(g, concurrency=1)
    assert fs(ops) == ["read"] * 5 + ["kill", "read", "read"]
    assert ops[5]["time"] == 5 * S


def test_each_thread_gives_every_thread_its_own_copy():
    ops = run(gen.clients(gen.each_thread([{"f": "a"}, {"f": "b"}])), concurrency=3)
    per_process = {}
    for op in ops:
        per_process.setdefault(op["process"], []).append(op["f"])
    assert per_process == {0: ["a", "b"], 1: ["a", "b"], 2: ["a", "b"]}


def test_crash_moves_thread_to_new_process():
    ops = run(gen.clients(gen.repeat({"f": "crash"}, 3)), concurrency=2, crash_fs={"crash"})
    assert [op["process"] for op in ops] == [0, 2, 4]


def test_map_ops_and_sleep():
    ops = run([gen.map_ops(lambda op: {**op, "value": 1}, {"f": "a"}), gen.sleep(3)])
    assert ops[0]["value"] == 1
    assert ops[1]["type"] == "sleep" and ops[1]["value"] == 3


def sends_then_drain(drain):
    sends = [{"f": "send", "value": [["send", 0, 1]]}, {"f": "send", "value": [["send", 1, 2]]}]
    return gen.phases(gen.clients(sends), gen.clients(drain))


def drive(g, threads, complete):
    """Run `g` as an interpreter would with `threads` client threads, each op completed at
    once by `complete(op)`; an info completion moves its thread to a new process. Returns
    the ops in order."""
    ctx = Context.initial(threads)
    ops = []
    for _ in range(50):
        result = gen.op(g, None, ctx)
        if result is None:
            break
        op, g = result
        ops.append(op)
        thread = ctx.thread_of(op["process"])
        g = gen.update(g, None, ctx.busy(thread), op)
        done = complete(op)
        g = gen.update(g, None, ctx.busy(thread), done)
        ctx = ctx.release(thread, crashed=done["type"] == "info")
    return ops


def acknowledged(op, offset):
    micro = op["value"][0]
    return {**op, "type": "ok", "value": [["send", micro[1], [offset, micro[2]]]]}


def test_drain_polls_until_caught_up_with_highest_offset():
    polls = 0

    def complete(op):
        nonlocal polls
        if op["f"] == "send":
            return acknowledged(op, 5 if op["value"][0][1] == 0 else 3)
        if op["f"] == "poll":
            polls += 1
            read = {"0": [[4, 9], [5, 1]]} if polls == 1 else {"1": [[3, 2]]}
            return {**op, "type": "ok", "value": [["poll", read]]}
        return {**op, "type": "info" if op["f"] == "crash" else "ok"}

    ops = drive(sends_then_drain(final.drain([0, 1])), 1, complete)
    assert fs(ops) == ["send", "send", "crash", "assign", "poll", "poll"]
    assert ops[3]["value"] == [0, 1] and ops[3]["seek_to_beginning"] is True
    assert ops[3]["process"] == 1, "after the crash, a new process"


def test_drain_gives_up_after_idle_polls_and_retries_failed_assign():
    assigns = 0

    def complete(op):
        nonlocal assigns
        if op["f"] == "send":
            return acknowledged(op, 0)
        if op["f"] == "assign":
            assigns += 1
            return {**op, "type": "fail" if assigns == 1 else "ok"}
        return {**op, "type": "ok", "value": [["poll", {}]]}

    ops = drive(sends_then_drain(final.drain([0, 1], idle_polls=2, crash_first=False)), 1,
                complete)
    assert fs(ops) == ["send", "send", "assign", "assign", "poll", "poll"]


@pytest.mark.parametrize("outcome", ["ok", "fail", "info"])
def test_drain_with_end_offsets_asks_once_per_thread_after_its_polls(outcome):
    def complete(op):
        if op["f"] == "send":
            return acknowledged(op, 0)
        if op["f"] == "poll":
            return {**op, "type": "ok", "value": [["poll", {}]]}
        if op["f"] == "end-offsets":
            return {**op, "type": outcome, "value": {"0": 1, "1": 1}}
        return {**op, "type": "ok"}

    ops = drive(sends_then_drain(final.drain([0, 1], idle_polls=1, crash_first=False,
                                             end_offsets=True)), 2, complete)
    ends = [op for op in ops if op["f"] == "end-offsets"]
    assert [op["value"] for op in ends] == [[0, 1], [0, 1]]
    assert {op["process"] for op in ends} == {0, 1}
    assert all(fs(ops)[i - 1] == "poll" for i, op in enumerate(ops) if op in ends)


def test_final_phase_heals_sleeps_then_drains():
    g = final.final_phase({"f": "heal", "type": "info"}, final.drain([0], crash_first=False),
                        recovery_seconds=2)
    ops = run(g, concurrency=1, limit=4)
    assert [(op["f"], op["process"]) for op in ops] == [
        ("heal", "nemesis"), ("sleep", "nemesis"), ("assign", 0), ("poll", 0)]
