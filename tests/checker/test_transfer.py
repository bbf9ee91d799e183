"""The transfer checker on hand-written histories: a valid consume-transform-produce
history, and for each anomaly an invalid history beside its valid near miss."""

from __future__ import annotations

import json
from typing import Any

from checker.history import Op
from checker.registry import composed
from checker.transfer import TransferChecker, input_value

TEST = {"final_reads": True}
IN_X, IN_Y, OUT_X, OUT_Y = 0, 1, 10, 11


class History:
    def __init__(self) -> None:
        self.ops: list[Op] = []

    def line(self, kind: str, process: Any, f: str, value: Any, **extra: Any) -> int:
        self.ops.append(Op(len(self.ops), len(self.ops) * 1000, kind, process, f, value, extra))
        return len(self.ops) - 1

    def send(self, key: int, value: int, offset: int) -> int:
        self.line("invoke", "p", "send", [["send", key, value]])
        return self.line("ok", "p", "send", [["send", key, [offset, value]]])

    def transfer(self, process: Any, kind: str, reads: dict[int, list[list[int]]],
                 outputs: list[tuple[int, int | None, int]], attempt: int, **extra: Any
                 ) -> int:
        """A transfer of `reads` whose outputs (output key, offset, input value) are sent
        as `<input value>:<attempt>`."""
        self.line("invoke", process, "txn", [["poll"]], group="g0")
        value = [["poll", {str(k): pairs for k, pairs in reads.items()}],
                 *(["send", key, [offset, f"{item}:{attempt}"]]
                   for key, offset, item in outputs)]
        offsets = {str(k): pairs[-1][0] + 1 for k, pairs in reads.items()}
        return self.line(kind, process, "txn", value, group="g0", offsets=offsets, **extra)

    def committed(self, offsets: dict[int, int | None]) -> int:
        self.line("invoke", "c", "committed", {"group": "g0"}, group="g0")
        return self.line("ok", "c", "committed",
                         {"group": "g0", "offsets": {str(k): n for k, n in offsets.items()}},
                         group="g0")

    def drain(self, reads: dict[int, list[list[int]]]) -> int:
        self.line("invoke", "d", "poll", [["poll"]])
        return self.line("ok", "d", "poll",
                         [["poll", {str(k): pairs for k, pairs in reads.items()}]])


def pipeline(*, duplicate: bool = False, lose: bool = False, commit_y: int = 1,
             with_committed: bool = True) -> tuple[History, dict[str, int]]:
    """x: 1, 2 and y: 3 transferred; the first try of y aborted on purpose."""
    h = History()
    h.send(IN_X, 1, 0)
    h.send(IN_X, 2, 1)
    h.send(IN_Y, 3, 0)
    ops = {"t1": h.transfer("w1", "ok", {IN_X: [[0, 1], [1, 2]]},
                            [(OUT_X, 0, 1), (OUT_X, 1, 2)], 0)}
    ops["aborted"] = h.transfer("w2", "fail", {IN_Y: [[0, 3]]}, [(OUT_Y, 0, 3)], 1,
                                abort=True)
    ops["t3"] = h.transfer("w2", "info" if lose else "ok", {IN_Y: [[0, 3]]}, [(OUT_Y, 2, 3)],
                           2)
    if duplicate:
        ops["zombie"] = h.transfer("w3", "info", {IN_Y: [[0, 3]]}, [(OUT_Y, 4, 3)], 3)
    if with_committed:
        ops["committed"] = h.committed({IN_X: 2, IN_Y: commit_y})
    outputs = [] if lose else [[2, "3:2"]] + ([[4, "3:3"]] if duplicate else [])
    h.drain({IN_X: [[0, 1], [1, 2]], IN_Y: [[0, 3]], OUT_X: [[0, "1:0"], [1, "2:0"]],
             OUT_Y: outputs})
    return h, ops


def check(h: History, test: dict[str, Any] = TEST):
    result = TransferChecker().check(test, h.ops, {})
    json.dumps(result.to_json())
    return result


def test_a_valid_pipeline_with_an_abort_and_a_retry():
    result = check(pipeline()[0])
    assert result.valid is True and result.anomalies == {}
    assert result.stats == {
        "applicable": True, "transfers": {"fail": 1, "ok": 2}, "aborted-on-purpose": 1,
        "inputs": 3, "outputs": 3, "inputs-with-output": 3, "outputs-without-input": 0,
        "reprocessed": 1, "group": "g0", "committed-offsets": {"0": 2, "1": 1}}


def test_an_input_output_twice_is_eos_duplicate_with_both_writers():
    result = check(pipeline(duplicate=True)[0])
    _, ops = pipeline(duplicate=True)
    assert result.valid is False and set(result.anomalies) == {"eos-duplicate"}
    [witness] = result.anomalies["eos-duplicate"].examples
    assert witness == {"key": IN_Y, "offset": 0, "value": 3,
                       "outputs": [(OUT_Y, 2, "3:2"), (OUT_Y, 4, "3:3")],
                       "ops": sorted([ops["aborted"], ops["t3"], ops["zombie"]])}


def test_an_aborted_output_that_no_reader_saw_is_no_duplicate():
    h, _ = pipeline()
    assert len([op for op in h.ops if op.f == "txn" and op.type != "invoke"
                and ["send", OUT_Y, [0, "3:1"]] in op.value]) == 1
    assert "eos-duplicate" not in check(h).anomalies


def test_an_input_below_the_committed_offset_without_output_is_eos_loss():
    h, ops = pipeline(lose=True)
    result = check(h)
    assert result.valid is False and set(result.anomalies) == {"eos-loss"}
    [witness] = result.anomalies["eos-loss"].examples
    assert (witness["key"], witness["offset"], witness["value"]) == (IN_Y, 0, 3)
    assert witness["committed-offset"] == 1 and witness["committed-by"] is None
    assert witness["ops"] == sorted([ops["aborted"], ops["t3"], ops["committed"]])
    near_miss, _ = pipeline(lose=True, commit_y=0)
    assert check(near_miss).valid is True
    allowed = check(h, {"final_reads": False})
    assert allowed.valid is True and allowed.allowed == ["eos-loss"]


def test_a_commit_past_an_unprocessed_input_names_the_committing_transfer():
    h = History()
    h.send(IN_X, 1, 0)
    h.send(IN_X, 2, 1)
    skipper = h.transfer("w", "ok", {IN_X: [[1, 2]]}, [(OUT_X, 0, 2)], 0)
    h.committed({IN_X: 2})
    h.drain({IN_X: [[0, 1], [1, 2]], OUT_X: [[0, "2:0"]]})
    [witness] = check(h).anomalies["eos-loss"].examples
    assert (witness["value"], witness["committed-by"]) == (1, skipper)
    assert skipper in witness["ops"]


def test_an_output_past_the_committed_offset_is_eos_offset_mismatch():
    h, ops = pipeline(commit_y=0)
    h.ops[-1] = Op(h.ops[-1].index, h.ops[-1].time, "ok", "d", "poll", [["poll", {
        "0": [[0, 1], [1, 2]], "1": [[0, 3]], "10": [[0, "1:0"], [1, "2:0"]],
        "11": [[2, "3:2"]]}]], {})
    result = check(h)
    assert result.valid is False and set(result.anomalies) == {"eos-offset-mismatch"}
    [witness] = result.anomalies["eos-offset-mismatch"].examples
    assert (witness["key"], witness["offset"], witness["value"]) == (IN_Y, 0, 3)
    assert witness["committed-offset"] == 0 and witness["outputs"] == [(OUT_Y, 2, "3:2")]
    assert ops["committed"] in witness["ops"] and ops["t3"] in witness["ops"]
    assert check(pipeline(commit_y=1)[0]).valid is True


def test_no_committed_offsets_read_is_unknown():
    result = check(pipeline(with_committed=False)[0])
    assert result.valid == "unknown" and "committed offsets" in result.error
    assert check(pipeline(duplicate=True, with_committed=False)[0]).valid is False


def test_a_history_without_transfers_has_nothing_to_check_so_it_is_unknown_not_valid():
    h = History()
    h.send(IN_X, 1, 0)
    h.drain({IN_X: [[0, 1]]})
    result = check(h)
    assert result.valid == "unknown" and result.stats == {"applicable": False}
    assert result.error == "nothing to check: no transfer (completed txn op) in the history"


def test_transfer_is_a_registered_checker():
    result = composed(["transfer"]).check(TEST, pipeline()[0].ops, {})
    assert result.valid is True and set(result.checkers) == {"transfer"}


def test_outputs_name_their_input_before_the_attempt():
    assert input_value("17:204") == 17 and input_value("-3:1") == -3
    assert input_value("a:b:9") == "a:b" and input_value(17) == 17
