"""Histories that break one rule of the history format each, with the line and reason a
reader must report (shared by the JSONL reader's and the Spark path's tests)."""

from __future__ import annotations

import json


def jsonl(*ops: dict) -> str:
    return "".join(json.dumps(op) + "\n" for op in ops)


def make_op(index, kind, process, f="read", value=None, time_=None, **extra) -> dict:
    return {"index": index, "time": index * 10 if time_ is None else time_, "type": kind,
            "process": process, "f": f, "value": value, **extra}


INVOKE0 = jsonl(make_op(0, "invoke", 0))

BAD_HISTORIES = {
    "invalid JSON": (INVOKE0 + '{"index": 1,\n', 2, "invalid JSON"),
    "NaN": (INVOKE0 + '{"index": 1, "time": NaN}\n', 2, "invalid JSON: NaN"),
    "not an object": (INVOKE0 + "[1, 2]\n", 2, "expected a JSON object, got list"),
    "missing index": ('{"time": 0, "type": "invoke", "process": 0, "f": "read"}\n', 1,
                      "missing field 'index'"),
    "missing time": ('{"index": 0, "type": "invoke", "process": 0, "f": "read"}\n', 1,
                     "missing field 'time'"),
    "missing type": ('{"index": 0, "time": 0, "process": 0, "f": "read"}\n', 1,
                     "missing field 'type'"),
    "missing process": ('{"index": 0, "time": 0, "type": "invoke", "f": "read"}\n', 1,
                        "missing field 'process'"),
    "missing f": ('{"index": 0, "time": 0, "type": "invoke", "process": 0}\n', 1,
                  "missing field 'f'"),
    "index not an integer": (jsonl({**make_op(0, "invoke", 0), "index": "0"}), 1, "field 'index'"),
    "negative time": (jsonl(make_op(0, "invoke", 0, time_=-1)), 1, "field 'time'"),
    "float time": (jsonl(make_op(0, "invoke", 0, time_=1.5)), 1, "field 'time'"),
    "type not a string": (jsonl(make_op(0, 3, 0)), 1, "field 'type' must be a string"),
    "process boolean": (jsonl(make_op(0, "invoke", True)), 1, "field 'process'"),
    "process float": (jsonl(make_op(0, "invoke", 1.5)), 1, "field 'process'"),
    "empty f": (jsonl(make_op(0, "invoke", 0, f="")), 1, "field 'f'"),
    "unknown type": (INVOKE0 + jsonl(make_op(1, "done", 0)), 2, "unknown type 'done'"),
    "index gap": (INVOKE0 + jsonl(make_op(2, "ok", 0)), 2, "index 2 where 1 was expected"),
    "index not from 0": (jsonl(make_op(1, "invoke", 0)), 1, "index 1 where 0 was expected"),
    "completion without invoke": (INVOKE0 + jsonl(make_op(1, "ok", 1)), 2,
                                  "ok completion of 'read' by process 1 without an open invoke"),
    "nemesis ok without invoke": (jsonl(make_op(0, "ok", "nemesis", f="kill")), 1,
                                  "without an open invoke"),
    "invoke twice": (INVOKE0 + jsonl(make_op(1, "invoke", 0, f="write", value=1)), 2,
                     "process 0 invokes 'write' while its 'read' (index 0) has not completed"),
    "invoke after info": (INVOKE0 + jsonl(make_op(1, "info", 0), make_op(2, "invoke", 0)), 3,
                          "process 0 invokes again after an info completion"),
    "f differs": (INVOKE0 + jsonl(make_op(1, "ok", 0, f="write")), 2,
                  "ok completion has f 'write' but process 0 invoked 'read'"),
    "completion before invoke": (
        jsonl(make_op(0, "invoke", 0, time_=50), make_op(1, "ok", 0, time_=40)), 2,
        "completion time 40 is before its invoke's time 50",
    ),
}
