"""Property tests: random valid histories survive the writer/reader, the EDN round trip and
pickling (how Spark ships them)."""

from __future__ import annotations

import io
import os
import pickle
import tempfile

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from checker.history import HistoryWriter, load_history, pair_operations, write_edn
from checker.history.formats import read_ops

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)
SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | TEXT)
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=12,
)
MICRO_OPS = st.lists(
    st.tuples(st.sampled_from(["send", "poll", "r", "append"]), st.integers(0, 5), VALUES)
    .map(list), min_size=1, max_size=3,
)
NAMES = st.sampled_from(["read", "write", "cas", "send", "start-partition", "odd name", "ф"])
EXTRA = st.dictionaries(st.sampled_from(["error", "node", "acks", "odd key"]), VALUES, max_size=2)


@st.composite
def histories(draw) -> list[dict]:
    """A valid history as op dicts (no index, no time): processes invoke, complete, crash."""
    ops: list[dict] = []
    open_ops: dict[int, dict] = {}
    live = [0, 1, 2]
    next_process = 3
    for _ in range(draw(st.integers(0, 30))):
        choice = draw(st.integers(0, 9))
        if choice == 0:
            ops.append({"type": "info", "process": "nemesis", "f": draw(NAMES),
                        "value": draw(VALUES)})
            continue
        process = draw(st.sampled_from(live))
        invoke = open_ops.pop(process, None)
        if invoke is None:
            invoke = {"type": "invoke", "process": process, "f": draw(NAMES),
                      "value": draw(VALUES | MICRO_OPS), **draw(EXTRA)}
            open_ops[process] = invoke
            ops.append(invoke)
            continue
        kind = draw(st.sampled_from(["ok", "fail", "info"]))
        ops.append({"type": kind, "process": process, "f": invoke["f"],
                    "value": draw(VALUES | MICRO_OPS), **draw(EXTRA)})
        if kind == "info":
            live[live.index(process)] = next_process
            next_process += 1
    return ops


class _Clock:
    def __init__(self) -> None:
        self.now = 0

    def __call__(self) -> int:
        self.now += 3
        return self.now


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories())
def test_written_histories_read_back_export_to_edn_and_pickle(history):
    with tempfile.TemporaryDirectory() as directory:
        path = os.path.join(directory, "history.jsonl")
        with HistoryWriter(path, clock=_Clock()) as writer:
            written = [writer.append(op) for op in history]
        assert load_history(path) == written
        assert [op.index for op in written] == list(range(len(history)))
        edn = io.StringIO()
        write_edn(written, edn)
        edn_path = os.path.join(directory, "history.edn")
        with open(edn_path, "w", encoding="utf-8") as out:
            out.write(edn.getvalue())
        if written:
            assert read_ops(edn_path) == written
    unpickled = pickle.loads(pickle.dumps(written, pickle.HIGHEST_PROTOCOL))
    assert unpickled == written
    assert [op.extra for op in unpickled] == [op.extra for op in written]
    operations = pair_operations(written)
    invokes = [op for op in written if op.type == "invoke" and op.process != "nemesis"]
    assert [op.invoke_index for op in operations] == [op.index for op in invokes]
    for operation in operations:
        assert (operation.ret is None) == (operation.status == "info")
        assert operation.ret is None or operation.ret >= operation.call
