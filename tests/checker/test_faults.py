"""The faults checker: invocations and effects of the asked faults, named as asked."""

from __future__ import annotations

from checker.faults import FaultsChecker, fault_stats
from checker.history import FAULT_STOPS, op_from_json
from checker.registry import CHECKERS, FAULTS_CHECKER
from nemesis.package import FAULTS


def _nemesis(f, value, fault=None):
    op = {"type": "info", "process": "nemesis", "f": f, "value": value}
    return {**op, "fault": fault} if fault else op


def _pair(f, asked, done, fault=None):
    return [_nemesis(f, asked, fault), _nemesis(f, done, fault)]


def _ops(objects):
    return [op_from_json({**obj, "index": index, "time": index}, "test", index + 1)
            for index, obj in enumerate(objects)]


def _history(*pairs):
    return _ops([op for pair in pairs for op in pair])


ASKED = {"nemesis": "kill-coordinator,isolate-coordinator,pause-consumers,add-partitions"}


def test_counts_invoked_and_took_effect_per_asked_fault():
    history = _history(
        _pair("start-partition", "coordinator", {"n1": ["n2", "n3"]}, "isolate-coordinator"),
        _pair("stop-partition", None, "network-healed", "isolate-coordinator"),
        _pair("kill", "coordinator", "no-target", "kill-coordinator"),
        _pair("start", None, "not-started", "kill-coordinator"),
        _pair("kill", "coordinator", {"skipped": "no groups"}, "kill-coordinator"),
        _pair("add-partitions", 1, {"topic": "t", "partitions": [3, 4]}, "add-partitions"),
        _pair("add-partitions", 2, {"topic": "t", "partitions": [4, 6]}, "add-partitions"),
        _pair("heal", None, {"healed": True, "started": []}))
    result = FaultsChecker().check(ASKED, history, {})
    assert result.valid is True
    assert result.stats == {
        "asked": ["kill-coordinator", "isolate-coordinator", "pause-consumers",
                  "add-partitions"],
        "invoked": {"isolate-coordinator": 1, "kill-coordinator": 2, "add-partitions": 2,
                    "pause-consumers": 0},
        "took_effect": {"isolate-coordinator": 1, "kill-coordinator": 0, "add-partitions": 2,
                        "pause-consumers": 0},
        "never": ["kill-coordinator", "pause-consumers"]}


def test_an_error_or_a_missing_completion_is_no_effect():
    history = _history(
        [_nemesis("pause", "one", "pause"),
         {**_nemesis("pause", "one", "pause"), "error": "RuntimeError: boom"}],
        [_nemesis("kill", "one", "kill")])
    stats = fault_stats({"nemesis": "pause,kill"}, history)
    assert stats["invoked"] == {"pause": 1, "kill": 1}
    assert stats["took_effect"] == {"pause": 0, "kill": 0}
    assert stats["never"] == ["pause", "kill"]


def test_none_asked_and_a_bare_history_names_what_it_shows():
    assert fault_stats({"nemesis": "none"}, []) == {
        "asked": [], "invoked": {}, "took_effect": {}, "never": []}
    jepsen = _ops([
        {"type": "invoke", "process": "nemesis", "f": "start-partition", "value": "halves"},
        {"type": "info", "process": "nemesis", "f": "start-partition", "value": {"n1": []}},
        {"type": "invoke", "process": "nemesis", "f": "stop-partition", "value": None},
        {"type": "info", "process": "nemesis", "f": "stop-partition", "value": "healed"}])
    assert fault_stats({}, jepsen) == {
        "asked": ["start-partition"], "invoked": {"start-partition": 1},
        "took_effect": {"start-partition": 1}, "never": []}


def test_every_lasting_fault_has_its_stop_in_the_history_contract():
    """The progress line and this checker tell starts from stops by FAULT_STOPS."""
    for name, fault in FAULTS.items():
        if fault.stop:
            assert FAULT_STOPS.get(fault.start) == fault.stop, name


def test_registered():
    assert isinstance(CHECKERS[FAULTS_CHECKER](), FaultsChecker)
