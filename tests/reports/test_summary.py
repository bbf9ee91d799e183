"""The headline says what happened: never "no anomalies" when anomalies exist."""

from __future__ import annotations

from checker.allowed import ALLOWED_BECAUSE, because
from checker.queue.analysis import QueueChecker
from checker.registry import composed
from reports.summary import headline, summary_lines
from tests.support.queue_histories import Builder

SAFE = {"acks": "all", "broker_config": {"min.insync.replicas": "2",
                                         "unclean.leader.election.enable": "false"}}
UNCLEAN = {"acks": "all", "broker_config": {"min.insync.replicas": "1",
                                            "unclean.leader.election.enable": "true"}}
UNCLEAN_SETTINGS = ("min.insync.replicas=1", "unclean.leader.election.enable=true")


def lost_history():
    b = Builder()
    b.send("p", "x", 1, offset=0)
    b.send("p", "x", 2, offset=1)
    b.poll("q", {"x": [[1, 2]]})
    return b.ops


def test_allowed_losses_are_named_with_the_settings_that_allow_them():
    results = composed(["queue", "acks"]).check(UNCLEAN, lost_history(), {}).to_json()
    text = headline(results)
    assert text.startswith("VALID for this configuration: 1 acknowledged write lost")
    assert "lost-write 1" in text
    assert text.endswith(f"(allowed: {because('lost-write', *UNCLEAN_SETTINGS)})")
    assert "no anomalies" not in text


def test_each_allowed_type_is_named_with_its_own_reason():
    results = {"valid": True, "checkers": {
        "queue": {"valid": True, "allowed": ["int-send-skip"],
                  "anomalies": {"int-send-skip": {"count": 2}},
                  "stats": {"allowed-because": {"int-send-skip": because("int-send-skip")}}},
        "txn": {"valid": True, "allowed": ["G0", "G1c"],
                "anomalies": {"G0": {"count": 9}, "G1c": {"count": 16}},
                "stats": {"allowed-because": {"G0": because("G0"), "G1c": because("G1c")}}}}}
    text = headline(results)
    assert text == ("VALID for this configuration: "
                    f"G0 9 (allowed: {because('G0')}); "
                    f"G1c 16 (allowed: {because('G1c')}); "
                    f"int-send-skip 2 (allowed: {because('int-send-skip')})")
    assert len(set(ALLOWED_BECAUSE[k] for k in ("G0", "G1c", "int-send-skip"))) == 3


def test_the_safe_contract_is_invalid_and_a_clean_history_has_no_anomalies():
    results = composed(["queue", "acks"]).check(SAFE, lost_history(), {})
    assert headline(results.to_json()).startswith("INVALID: 1 acknowledged write lost")
    assert summary_lines(results)[0].startswith("kchaos: INVALID")
    b = Builder()
    b.send("p", "x", 1, offset=0)
    b.poll("q", {"x": [[0, 1]]})
    clean = composed(["queue", "acks"]).check(SAFE, b.ops, {}).to_json()
    assert headline(clean) == "VALID: no anomalies found"


def test_unknown_and_missing_results_say_so():
    assert headline(None).startswith("NO VERDICT")
    unknown = {"valid": "unknown", "checkers": {"queue": {"valid": "unknown", "error": "boom"}}}
    assert headline(unknown) == "UNKNOWN: queue (boom) could not decide"


def test_every_lost_write_is_kept_in_the_queue_stats():
    b = Builder()
    for value in range(40):
        b.send("p", "x", value, offset=value)
    b.send("p", "x", 99, offset=40)
    b.poll("q", {"x": [[40, 99]]})
    result = QueueChecker().check(UNCLEAN, b.ops, {})
    assert result.anomalies["lost-write"].count == 40
    assert len(result.anomalies["lost-write"].examples) == 8
    assert result.stats["lost-writes"] == sorted(([k, v, o] for k, v, o in
                                                  (["x", n, n] for n in range(40))), key=repr)
    assert result.stats["allowed-because"] == {
        "lost-write": because("lost-write", *UNCLEAN_SETTINGS)}
