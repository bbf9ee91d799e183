"""The register, cas-register and kv models against a brute-force checker on small
generated histories (the log model has its own, test_linearizability_log_bruteforce.py).

The brute force tries every order of the operations that respects real time
(and every subset of the unknown-outcome ones) against concrete sequential
specifications written here, independently of `checker.lin.models`; in
particular the kv model's symbolic append order is checked against plain
string concatenation. The portfolio and each of its two searches, the sweep
and the depth-first search, are checked alone.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from checker.history import Operation
from checker.lin.dfs import DepthFirst
from checker.lin.entries import prepare_entries
from checker.lin.models import MODELS, Model
from checker.lin.search import check_operations, partitions_of
from checker.lin.sweep import Sweep

SEARCHES = (Sweep, DepthFirst)


def register_spec(state, op):
    if op.f == "read":
        return op.output == state, state
    if op.f == "write":
        return True, op.input
    expected, new = op.input
    return (True, new) if state == expected else (False, state)


def kv_spec(state, op):
    key, value = op.input
    current = state.get(key, "")
    if op.f == "get":
        return op.output[1] == current, state
    updated = value if op.f == "put" else current + value
    return True, {**state, key: updated}


SPECS = {
    "register": (register_spec, lambda: None),
    "cas-register": (register_spec, lambda: None),
    "kv": (kv_spec, dict),
}


def brute_force(model: str, ops: list[Operation]) -> bool:
    spec, init = SPECS[model]
    live = [op for op in ops if op.status != "fail"]
    certain = [op for op in live if op.status == "ok"]
    unknown = [op for op in live if op.status != "ok" and op.f not in ("read", "get")]
    for count in range(len(unknown) + 1):
        for chosen in itertools.combinations(unknown, count):
            for order in itertools.permutations(certain + list(chosen)):
                if _respects_real_time(order) and _legal(spec, init(), order):
                    return True
    return False


def _respects_real_time(order) -> bool:
    for i, later in enumerate(order):
        for earlier in order[i + 1:]:
            if earlier.ret is not None and earlier.ret < later.call:
                return False
    return True


def _legal(spec, state, order) -> bool:
    for op in order:
        legal, state = spec(state, op)
        if not legal:
            return False
    return True


# --- generating histories ---------------------------------------------------------------------


@st.composite
def histories(draw, model: str):
    """Ops with random intervals; outputs from a random linearization, sometimes corrupted."""
    spec, init = SPECS[model]
    count = draw(st.integers(1, 6))
    ops = []
    for index in range(count):
        call = draw(st.integers(0, 20))
        ret = call + draw(st.integers(0, 8))
        f, value = draw(_inputs(model))
        ops.append(Operation(process=index, f=f, input=value, output=None, status="ok",
                             call=call, ret=ret, invoke_index=index, complete_index=index))
    points = {op.invoke_index: draw(st.integers(op.call, op.ret)) for op in ops}
    state = init()
    completed = []
    for op in sorted(ops, key=lambda o: (points[o.invoke_index], o.invoke_index)):
        output = _output(model, state, op)
        legal, new_state = spec(state, replace(op, output=output))
        if legal:
            state = new_state
            completed.append(replace(op, output=output))
        else:
            completed.append(replace(op, output=output, status="fail"))
    result = []
    for op in sorted(completed, key=lambda o: o.invoke_index):
        outcome = draw(st.sampled_from(["keep", "keep", "keep", "info", "corrupt"]))
        if outcome == "info" and op.status == "ok":
            op = replace(op, status="info", output=None, ret=None, complete_index=None)
        elif outcome == "corrupt" and op.status == "ok":
            op = replace(op, output=draw(_corrupt_output(model, op)))
        result.append(op)
    return result


def _inputs(model: str):
    values = st.integers(0, 2)
    if model == "register":
        return st.one_of(st.tuples(st.just("read"), st.none()), st.tuples(st.just("write"), values))
    if model == "cas-register":
        return st.one_of(
            st.tuples(st.just("read"), st.none()),
            st.tuples(st.just("write"), values),
            st.tuples(st.just("cas"), st.lists(values, min_size=2, max_size=2)),
        )
    keys = st.sampled_from(["k1", "k2"])
    chunks = st.sampled_from(["a", "b", "ab", "c"])
    return st.one_of(
        st.tuples(st.just("get"), st.tuples(keys, st.none()).map(list)),
        st.tuples(st.sampled_from(["put", "append"]), st.tuples(keys, chunks).map(list)),
    )


def _output(model: str, state, op: Operation):
    if model in ("register", "cas-register"):
        return state if op.f == "read" else None
    key = op.input[0]
    return [key, state.get(key, "")] if op.f == "get" else None


def _corrupt_output(model: str, op: Operation):
    if model in ("register", "cas-register"):
        return st.integers(0, 2) if op.f == "read" else st.just(op.output)
    key = op.input[0]
    return st.sampled_from(["", "a", "ba", "ab", "c"]).map(lambda s: [key, s]) \
        if op.f == "get" else st.just(op.output)


def finish(search) -> bool:
    """Run one search to its end; its verdict."""
    run = search.run()
    while True:
        try:
            next(run)
        except StopIteration as finished:
            return finished.value


def decide_alone(search_class, model: Model, ops: list[Operation]) -> bool:
    """The verdict of one search on every partition."""
    return all(finish(search_class(model, prepare_entries(model, part), 10**7))
               for part in partitions_of(model, ops).values())


def _check(model: str, ops: list[Operation]) -> None:
    expected = brute_force(model, ops)
    result = check_operations(MODELS[model], ops, complete=True)
    assert result.valid is expected, (ops, result)
    for search_class in SEARCHES:
        assert decide_alone(search_class, MODELS[model], ops) is expected, (search_class, ops)


SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(histories("register"))
def test_register_agrees_with_brute_force(ops):
    _check("register", ops)


@SETTINGS
@given(histories("cas-register"))
def test_cas_register_agrees_with_brute_force(ops):
    _check("cas-register", ops)


def _kv_op(index, f, value, output, call, ret):
    return Operation(process=index, f=f, input=["k", value], output=output, status="ok",
                     call=call, ret=ret, invoke_index=index, complete_index=index)


@SETTINGS
@given(histories("kv"))
@example([_kv_op(0, "get", None, ["k", "bb"], 0, 1),
          _kv_op(1, "append", "b", None, 0, 0),
          _kv_op(2, "append", "b", None, 0, 0)]).via("equal appends at equal times stay two")
def test_kv_agrees_with_brute_force(ops):
    _check("kv", ops)


def test_generator_makes_both_verdicts():
    """The property tests above are only worth something if both answers occur."""
    verdicts = set()

    @settings(max_examples=200, deadline=None, database=None)
    @given(histories("kv"))
    def collect(ops):
        verdicts.add(brute_force("kv", ops))

    collect()
    assert verdicts == {True, False}
