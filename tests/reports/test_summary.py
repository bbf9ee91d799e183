"""The headline says what happened: never "no anomalies" when anomalies exist."""

from __future__ import annotations

from checker.queue.analysis import QueueChecker
from checker.registry import composed
from reports.summary import headline, summary_lines
from tests.support.queue_histories import Builder

SAFE = {"acks": "all", "broker_config": {"min.insync.replicas": "2",
                                         "unclean.leader.election.enable": "false"}}
UNCLEAN = {"acks": "all", "broker_config": {"min.insync.replicas": "1",
                                            "unclean.leader.election.enable": "true"}}


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
    assert "allowed because min.insync.replicas=1, unclean.leader.election.enable=true" in text
    assert "no anomalies" not in text


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
    assert result.stats["allowed-because"] == ["min.insync.replicas=1",
                                               "unclean.leader.election.enable=true"]
