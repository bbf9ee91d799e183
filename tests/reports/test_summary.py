"""The headline says what happened: never "no anomalies" when anomalies exist."""

from __future__ import annotations

from checker.allowed import ALLOWED_BECAUSE, because
from checker.queue.analysis import QueueChecker
from checker.registry import composed
from reports.summary import headline, run_state, summary_lines
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
    assert text.startswith("ALLOWED: 1 acknowledged write lost")
    assert run_state(results) == "allowed"
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
    assert text == ("ALLOWED: "
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
    assert run_state(clean) == "valid"
    assert run_state(results.to_json()) == "invalid"


def test_unknown_and_missing_results_say_so():
    assert headline(None).startswith("NO VERDICT")
    unknown = {"valid": "unknown", "checkers": {"queue": {"valid": "unknown", "error": "boom"}}}
    assert headline(unknown) == "UNKNOWN: queue (boom) could not decide"
    assert run_state(unknown) == "unknown" and run_state(None) is None


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


def _faults(asked, took_effect):
    return {"valid": True, "stats": {
        "asked": asked, "invoked": dict.fromkeys(asked, 1), "took_effect": took_effect,
        "never": [name for name in asked if not took_effect.get(name)]}}


def _run(faults, queue=None):
    return {"valid": True, "checkers": {"queue": queue or {"valid": True, "anomalies": {}},
                                        "faults": faults}}


def test_a_run_whose_asked_faults_never_took_effect_is_inconclusive():
    asked = ["kill-coordinator", "isolate-coordinator", "pause-consumers"]
    none = _run(_faults(asked, dict.fromkeys(asked, 0)))
    assert run_state(none) == "inconclusive"
    assert headline(none) == (
        "INCONCLUSIVE: no asked fault took effect, so nothing was tested; faults: none took "
        "effect; never: kill-coordinator, isolate-coordinator, pause-consumers")
    one = _run(_faults(asked, {"kill-coordinator": 0, "isolate-coordinator": 3,
                                "pause-consumers": 0}))
    assert run_state(one) == "valid"
    assert headline(one) == ("VALID: no anomalies found; faults: isolate-coordinator 3 took "
                             "effect; never: kill-coordinator, pause-consumers")
    nothing_asked = _run(_faults([], {}))
    assert run_state(nothing_asked) == "valid"
    assert headline(nothing_asked) == "VALID: no anomalies found"


def test_allowed_loss_outranks_faults_that_never_took_effect_and_invalid_outranks_all():
    allowed_loss = {"valid": True, "anomalies": {"lost-write": {"count": 47, "examples": []}},
                    "allowed": ["lost-write"]}
    run = _run(_faults(["kill"], {"kill": 0}), allowed_loss)
    assert run_state(run) == "allowed"
    assert headline(run).startswith("ALLOWED: lost-write 47")
    invalid = {**run, "valid": False, "checkers": {**run["checkers"], "queue": {
        "valid": False, "anomalies": {"duplicate": {"count": 2, "examples": []}}}}}
    assert run_state(invalid) == "invalid"
    assert headline(invalid).startswith("INVALID: duplicate 2")
    assert headline(invalid).endswith("; faults: none took effect; never: kill")


def test_many_faults_that_never_took_effect_are_counted_past_a_few():
    asked = [f"f{n}" for n in range(7)]
    run = _run(_faults(asked, {"f0": 1}))
    assert headline(run).endswith("faults: f0 1 took effect; never: f1, f2, f3, f4, 2 more")


def test_the_terminal_headline_has_its_states_colour():
    from checker.core import Result

    results = Result(True, checkers={"queue": Result(True)})
    assert summary_lines(results, colour=True)[0] == \
        "kchaos: \033[32mVALID: no anomalies found\033[0m"
