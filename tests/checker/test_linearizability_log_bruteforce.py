"""The log model against a brute-force checker on small generated queue histories.

The brute force knows nothing of `checker.lin.models`: it takes the queue ops as a
history holds them (a poll reading several keys is one atomic op here), tries
every order that respects real time, every subset of the sends of unknown
outcome and every offset each of those may have been given, and runs the
concrete specification of a log per key: an acknowledged send's offset is above
every offset in the log, a poll's records for a key are consecutive records of
it. So the model's reductions (unknown sends never polled dropped, the others
placed where a poll saw them, the log resolved once from the offsets, polls
split per key) are checked against plain search.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from checker.history import Operation
from checker.lin.models import LOG
from checker.lin.search import check_operations
from tests.checker.test_linearizability_bruteforce import SEARCHES, decide_alone

KEYS = (0, 1)


def _sends(op: Operation) -> list[tuple[int, int, int | None]]:
    """(key, value, offset) of a send op; the offset is None unless acknowledged."""
    if op.status == "ok":
        return [(k, v, o) for _, k, (o, v) in op.output]
    return [(k, v, None) for _, k, v in op.input]


def _uncertain(op: Operation) -> bool:
    """Unknown outcome: info, or acknowledged without an offset (acks=0)."""
    return op.f == "send" and any(o is None for _, _, o in _sends(op))


def _successors(log: dict, op: Operation, top: int) -> list[dict]:
    if op.f == "poll":
        [[_, reads]] = op.output
        for key, records in reads.items():
            if records and not _consecutive(log.get(int(key), ()), records):
                return []
        return [log]
    [(key, value, offset)] = _sends(op)
    current = log.get(key, ())
    last = current[-1][0] if current else -1
    choices = [offset] if offset is not None else range(last + 1, top + 2)
    return [{**log, key: current + ((o, value),)} for o in choices if o > last]


def _consecutive(current: tuple, records: list) -> bool:
    wanted = [tuple(r) for r in records]
    return any(list(current[i:i + len(wanted)]) == wanted for i in range(len(current)))


def brute_force(ops: list[Operation]) -> bool:
    live = [op for op in ops if op.status != "fail" and op.f in ("send", "poll")]
    offsets = [o for op in live if op.f == "send" for _, _, o in _sends(op) if o is not None]
    offsets += [o for op in live if op.f == "poll"
                for records in op.output[0][1].values() for o, _ in records]
    top = max(offsets, default=0)
    failed: set = set()

    def search(log: dict, remaining: frozenset[int]) -> bool:
        memo = (tuple(sorted(log.items())), remaining)
        if memo in failed:
            return False
        if all(_uncertain(live[i]) for i in remaining):
            return True
        for i in remaining:
            op = live[i]
            if any(not _uncertain(live[j]) and live[j].ret < op.call for j in remaining):
                continue
            if any(search(after, remaining - {i}) for after in _successors(log, op, top)):
                return True
        failed.add(memo)
        return False

    return search({}, frozenset(range(len(live))))


# --- generating histories ---------------------------------------------------------------------


@st.composite
def histories(draw):
    """Sends and polls at random intervals, outputs from one run of a log per key: sends
    made unknown, lost or failed, polls reading slices of the log as it is at their point
    or at the end (reads from the future), and one output corrupted in half of them."""
    count = draw(st.integers(3, 9))
    plans = []
    for index in range(count):
        call = draw(st.integers(0, 20))
        ret = call + draw(st.integers(0, 8))
        point = draw(st.integers(call, ret))
        f = draw(st.sampled_from(["send", "send", "send", "send", "poll", "poll", "assign"]))
        plans.append((point, index, call, ret, f))
    logs: dict[int, list[tuple[int, int]]] = {k: [] for k in KEYS}
    ops, late = [], []
    for _, index, call, ret, f in sorted(plans):
        base = Operation(process=index, f=f, input=None, output=None, status="ok", call=call,
                         ret=ret, invoke_index=index, complete_index=index)
        if f == "assign":
            ops.append(replace(base, input=[0], output=[0]))
        elif f == "send":
            key, value = draw(st.sampled_from((0, 0, 0, 1))), 100 + index
            fate = draw(st.sampled_from(["ok"] * 5 + ["info", "lost", "fail", "acks0"]))
            if fate not in ("lost", "fail"):
                log = logs[key]
                log.append(((log[-1][0] + 1 if log else 0) + draw(st.integers(0, 1)), value))
            offset = logs[key][-1][0] if fate in ("ok", "info") else None
            ops.append(_send(base, key, value, offset, fate))
        elif draw(st.booleans()):
            ops.append(replace(base, input=[["poll"]], output=[["poll", draw(_reads(logs))]]))
        else:
            late.append(base)
    ops += [replace(base, input=[["poll"]], output=[["poll", draw(_reads(logs))]])
            for base in late]
    ops.sort(key=lambda o: o.invoke_index)
    victim = draw(st.integers(-len(ops), len(ops) - 1))
    if victim >= 0:
        ops[victim] = draw(_corrupted(ops[victim]))
    return ops


@st.composite
def _reads(draw, logs):
    """Per key a slice of its log (often all of it), or nothing, or its last two records in
    reverse, or two records with the one between them left out."""
    reads = {}
    for key in KEYS:
        log = [list(r) for r in logs[key]]
        shape = draw(st.sampled_from(["all", "slice", "none", "reverse", "skip", "skip"]))
        records = log
        if shape == "slice" and log:
            start = draw(st.integers(0, len(log) - 1))
            records = log[start:start + draw(st.integers(1, len(log) - start))]
        elif shape == "none":
            records = []
        elif shape == "reverse":
            records = log[-2:][::-1]
        elif shape == "skip" and len(log) >= 3:
            first = draw(st.integers(0, len(log) - 3))
            records = [log[first], log[first + 2]]
        reads[str(key)] = records
    return reads


def _send(base: Operation, key: int, value: int, offset: int | None, fate: str) -> Operation:
    invoked = [["send", key, value]]
    if fate in ("ok", "acks0"):
        return replace(base, input=invoked, output=[["send", key, [offset, value]]])
    if fate == "fail":
        return replace(base, input=invoked, output=invoked, status="fail")
    return replace(base, input=invoked, status="info", ret=None, complete_index=None)


def _corrupted(op: Operation):
    if op.status != "ok" or op.f == "assign":
        return st.just(op)
    if op.f == "send":
        [[_, key, [offset, value]]] = op.output
        if offset is None:
            return st.just(op)
        wrong = st.integers(0, 4).map(lambda o: replace(op, output=[["send", key, [o, value]]]))
        return wrong
    [[_, reads]] = op.output
    records = st.lists(st.tuples(st.integers(0, 4), st.integers(100, 105)).map(list),
                       max_size=3)
    wrong = st.tuples(st.sampled_from(sorted(reads)), records).map(
        lambda kr: replace(op, output=[["poll", {**reads, kr[0]: kr[1]}]]))
    return wrong


def _op(index, f, invoked, output, call, ret, status="ok"):
    return Operation(process=index, f=f, input=invoked, output=output, status=status,
                     call=call, ret=None if status == "info" else ret, invoke_index=index,
                     complete_index=index)


SETTINGS = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(histories())
@example([_op(0, "send", [["send", 0, 100]], None, 0, None, status="info"),
          _op(1, "send", [["send", 0, 101]], [["send", 0, [1, 101]]], 0, 5),
          _op(2, "poll", [["poll"]], [["poll", {"0": [[0, 100], [1, 101]]}]], 6, 7)])
@example([_op(0, "send", [["send", 0, 100]], [["send", 0, [0, 100]]], 0, 1),
          _op(1, "send", [["send", 0, 101]], [["send", 0, [0, 101]]], 0, 1)])
@example([_op(0, "poll", [["poll"]], [["poll", {"0": [[3, 100]], "1": [[0, 101]]}]], 0, 9),
          _op(1, "send", [["send", 0, 100]], [["send", 0, [3, 100]]], 2, 3),
          _op(2, "send", [["send", 1, 101]], None, 5, None, status="info")])
def test_log_agrees_with_brute_force(ops):
    expected = brute_force(ops)
    result = check_operations(LOG, ops, complete=True)
    assert result.valid is expected, (ops, result)
    for search_class in SEARCHES:
        assert decide_alone(search_class, LOG, ops) is expected, (search_class, ops)


def test_generator_makes_both_verdicts():
    """The property test above is only worth something if both answers occur often."""
    verdicts = []

    @settings(max_examples=300, deadline=None, database=None)
    @given(histories())
    def collect(ops):
        verdicts.append(brute_force(ops))

    collect()
    assert verdicts.count(True) > 60 and verdicts.count(False) > 30
