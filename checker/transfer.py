"""Exactly-once consume-transform-produce, checked on a transfer history.

A transfer history (`workloads.transfer`) holds `send` ops that put input records on the
input keys, `txn` ops that are transfers (a poll of input keys, then one send per input
record to an output key, with the input's value; the input offsets committed in the
transaction in `offsets`), a `committed` op that read the consumer group's final
committed offsets ({"group", "offsets": {"k": next or null}}), and final polls that read
both topics whole at read_committed. Input keys are those `send` ops write; output keys
those `txn` ops send to. An output's value is `<input value>:<attempt>` (every transfer
attempt sends new values, so the log checkers' one-send-per-value rule holds), which
matches it to its input (input values are unique).
The committed output is what ok polls read of the output keys; the input, what ok sends
acknowledged at an offset and ok polls read of the input keys.

Anomalies (witnesses name ops by index):
  eos-duplicate        an input record's output appears more than once in the committed
                       output (outputs: [key, offset, value] each; ops: every transfer
                       that sent an output of that input)
  eos-loss             an input record below its key's final committed offset has no
                       output in the committed output (ops: the transfers that polled it,
                       the first ok transfer that committed past it, the committed read)
  eos-offset-mismatch  an input record at or past its key's final committed offset has an
                       output in the committed output: outputs and offsets did not commit
                       together (ops: the transfers that sent it, the committed read)

`eos-loss` is allowed when the test has no final reads (`final_reads` false: the output
may not have been read whole). Without a `committed` op of the transfers' group, loss and
offset mismatches cannot be judged: the verdict is "unknown". A history without transfer
ops has nothing to check: the verdict is "unknown", with that reason, and the stats say the
checker did not apply.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from checker.allowed import because
from checker.core import Anomaly, Result, condense
from checker.history import Op
from checker.queue.events import normalise_key

__all__ = ["ANOMALIES", "TransferChecker", "TransferHistory", "input_value"]

ANOMALIES = ("eos-duplicate", "eos-loss", "eos-offset-mismatch")
NOTHING_TO_CHECK = "nothing to check: no transfer (completed txn op) in the history"
Key = Any


@dataclass
class TransferHistory:
    """What a transfer history says, gathered in one pass (see the module docstring)."""

    inputs: dict[Key, dict[int, Any]] = field(default_factory=dict)
    outputs: dict[Key, dict[int, Any]] = field(default_factory=dict)
    input_keys: set[Key] = field(default_factory=set)
    output_keys: set[Key] = field(default_factory=set)
    sent_by: dict[Any, set[int]] = field(default_factory=dict)
    polled_by: dict[Any, set[int]] = field(default_factory=dict)
    commits: list[tuple[int, dict[Key, int]]] = field(default_factory=list)
    transfers: dict[str, int] = field(default_factory=dict)
    aborted_on_purpose: int = 0
    group: str | None = None
    committed: dict[str, tuple[int, dict[Key, int | None]]] = field(default_factory=dict)

    @classmethod
    def of(cls, history: Sequence[Op]) -> TransferHistory:
        found = cls()
        reads: list[tuple[Key, int, Any]] = []
        for op in history:
            if op.f == "send" and isinstance(op.value, list):
                found._input_send(op)
            elif op.f == "txn" and op.type != "invoke" and isinstance(op.value, list):
                found._transfer(op)
            elif op.f == "committed" and op.type == "ok" and isinstance(op.value, dict):
                offsets = {normalise_key(k): n for k, n in (op.value.get("offsets") or {}).items()}
                found.committed[op.value.get("group")] = (op.index, offsets)
            if op.type == "ok" and op.f in ("poll", "txn") and isinstance(op.value, list):
                reads.extend(_polled(op.value))
        for key, offset, value in reads:
            if key in found.output_keys:
                found.outputs.setdefault(key, {})[offset] = value
            elif key in found.input_keys:
                found.inputs.setdefault(key, {})[offset] = value
        return found

    def _input_send(self, op: Op) -> None:
        for micro in op.value:
            if not (isinstance(micro, list) and len(micro) == 3 and micro[0] == "send"):
                continue
            key = normalise_key(micro[1])
            self.input_keys.add(key)
            payload = micro[2]
            if op.type == "ok" and isinstance(payload, list) and isinstance(payload[0], int):
                self.inputs.setdefault(key, {})[payload[0]] = payload[1]

    def _transfer(self, op: Op) -> None:
        self.transfers[op.type] = self.transfers.get(op.type, 0) + 1
        self.aborted_on_purpose += bool(op.extra.get("abort")) and op.type == "fail"
        if self.group is None and op.extra.get("group") is not None:
            self.group = op.extra["group"]
        for micro in op.value:
            if micro and micro[0] == "send" and len(micro) == 3:
                self.output_keys.add(normalise_key(micro[1]))
                payload = micro[2]
                value = payload[1] if isinstance(payload, list) else payload
                self.sent_by.setdefault(input_value(value), set()).add(op.index)
        for _, _, value in _polled(op.value):
            self.polled_by.setdefault(value, set()).add(op.index)
        offsets = op.extra.get("offsets")
        if op.type == "ok" and isinstance(offsets, dict):
            self.commits.append((op.index, {normalise_key(k): n for k, n in offsets.items()}))

    def final_committed(self) -> tuple[int, dict[Key, int | None]] | None:
        """(the committed op's index, key -> next offset) of the transfers' group."""
        if self.group in self.committed:
            return self.committed[self.group]
        return next(iter(self.committed.values()), None) if len(self.committed) == 1 else None


def input_value(output: Any) -> Any:
    """The input value an output value was made from: the part before the `:`."""
    if not isinstance(output, str) or ":" not in output:
        return output
    head = output.rsplit(":", 1)[0]
    return int(head) if head.lstrip("-").isdigit() else head


def _polled(value: list[Any]) -> list[tuple[Key, int, Any]]:
    found = []
    for micro in value:
        if isinstance(micro, list) and len(micro) == 2 and micro[0] == "poll" \
                and isinstance(micro[1], dict):
            for key, pairs in micro[1].items():
                found.extend((normalise_key(key), offset, item) for offset, item in pairs)
    return found


def _duplicates(found: TransferHistory, places: Mapping[Any, list[tuple[Key, int, Any]]],
                origin: Mapping[Any, tuple[Key, int]]) -> list[dict[str, Any]]:
    witnesses = []
    for value, outputs in places.items():
        if len(outputs) > 1:
            key, offset = origin.get(value, (None, None))
            witnesses.append({"key": key, "offset": offset, "value": value,
                              "outputs": sorted(outputs, key=repr),
                              "ops": sorted(found.sent_by.get(value, ()))})
    return witnesses


def _against_commits(found: TransferHistory, places: Mapping[Any, list[tuple[Key, int, Any]]],
                     committed: tuple[int, dict[Key, int | None]]
                     ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(eos-loss witnesses, eos-offset-mismatch witnesses) against the final offsets."""
    index, offsets = committed
    losses, mismatches = [], []
    for key in sorted(found.input_keys, key=repr):
        limit = offsets.get(key)
        for offset, value in sorted(found.inputs.get(key, {}).items()):
            below = limit is not None and offset < limit
            if below and value not in places:
                committer = next((i for i, moved in found.commits
                                  if (moved.get(key) or 0) > offset), None)
                ops = {*found.polled_by.get(value, ()), index}
                if committer is not None:
                    ops.add(committer)
                losses.append({"key": key, "offset": offset, "value": value,
                               "committed-offset": limit, "committed-by": committer,
                               "ops": sorted(ops)})
            elif not below and value in places:
                mismatches.append({"key": key, "offset": offset, "value": value,
                                   "committed-offset": limit,
                                   "outputs": sorted(places[value], key=repr),
                                   "ops": sorted({*found.sent_by.get(value, ()), index})})
    return losses, mismatches


class TransferChecker:
    """Exactly-once anomalies of a transfer history; see the module docstring."""

    anomaly_types: ClassVar[tuple[str, ...]] = ANOMALIES

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        found = TransferHistory.of(history)
        if not found.transfers:
            return Result("unknown", stats={"applicable": False}, error=NOTHING_TO_CHECK,
                          seconds=time.monotonic() - started)
        places: dict[Any, list[tuple[Key, int, Any]]] = {}
        for key, records in found.outputs.items():
            for offset, value in records.items():
                places.setdefault(input_value(value), []).append((key, offset, value))
        origin = {value: (key, offset) for key, records in found.inputs.items()
                  for offset, value in records.items()}
        witnesses = {"eos-duplicate": _duplicates(found, places, origin)}
        committed = found.final_committed()
        if committed is not None:
            witnesses["eos-loss"], witnesses["eos-offset-mismatch"] = _against_commits(
                found, places, committed)
        anomalies: dict[str, Anomaly] = {kind: condense(items)
                                         for kind, items in witnesses.items() if items}
        allowed = {"eos-loss"} if test.get("final_reads") is False else set()
        stats = self._stats(found, places, origin, committed)
        if set(anomalies) & allowed:
            stats["allowed-because"] = {"eos-loss": because("eos-loss")}
        seconds = time.monotonic() - started
        failed = set(anomalies) - allowed
        if committed is None and not failed:
            return Result("unknown", anomalies, stats, seconds, error=(
                f"no committed offsets of group {found.group!r} were read: eos-loss and "
                "eos-offset-mismatch cannot be judged"))
        return Result(not failed, anomalies, stats, seconds, sorted(set(anomalies) & allowed))

    @staticmethod
    def _stats(found: TransferHistory, places: Mapping[Any, list[tuple[Key, int, Any]]],
               origin: Mapping[Any, tuple[Key, int]],
               committed: tuple[int, dict[Key, int | None]] | None) -> dict[str, Any]:
        return {
            "applicable": True,
            "transfers": dict(sorted(found.transfers.items())),
            "aborted-on-purpose": found.aborted_on_purpose,
            "inputs": len(origin),
            "outputs": sum(len(records) for records in found.outputs.values()),
            "inputs-with-output": sum(1 for value in origin if value in places),
            "outputs-without-input": sum(1 for value in places if value not in origin),
            "reprocessed": sum(1 for ops in found.polled_by.values() if len(ops) > 1),
            "group": found.group,
            "committed-offsets": None if committed is None else {
                str(k): n for k, n in sorted(committed[1].items(), key=lambda kv: repr(kv[0]))},
        }
