"""The history: the one contract every part of kchaos shares.

`ops` holds the op types, the JSONL reader, validator and writer and the EDN writer;
`formats` reads the other formats (EDN, Porcupine's); `errors` the one error of a bad
history; `bulk` pauses the garbage collector while many ops are built at once. This
package imports nothing else of kchaos.
"""

from checker.history.bulk import collector_paused
from checker.history.errors import HistoryError
from checker.history.formats import (
    FORMATS,
    QUEUE_FORMATS,
    detect_format,
    numbered_queue_ops,
    read_ops,
)
from checker.history.ops import (
    FAULT_STOPS,
    HEAL,
    NEMESIS,
    NO_EFFECT,
    OP_TYPES,
    HistoryValidator,
    HistoryWriter,
    NemesisPeriod,
    Op,
    Operation,
    OpType,
    fault_took_effect,
    load_history,
    nemesis_periods,
    numbered_ops,
    op_from_json,
    op_from_line,
    pair_operations,
    read_history,
    read_numbered_history,
    split_paired,
    write_edn,
    write_jsonl,
)

__all__ = [
    "FAULT_STOPS",
    "FORMATS",
    "HEAL",
    "NEMESIS",
    "NO_EFFECT",
    "OP_TYPES",
    "QUEUE_FORMATS",
    "HistoryError",
    "HistoryValidator",
    "HistoryWriter",
    "NemesisPeriod",
    "Op",
    "OpType",
    "Operation",
    "collector_paused",
    "detect_format",
    "fault_took_effect",
    "load_history",
    "nemesis_periods",
    "numbered_ops",
    "numbered_queue_ops",
    "op_from_json",
    "op_from_line",
    "pair_operations",
    "read_history",
    "read_numbered_history",
    "read_ops",
    "split_paired",
    "write_edn",
    "write_jsonl",
]
