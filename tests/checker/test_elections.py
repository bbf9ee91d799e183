"""The election checker and the controller event logs: losses joined with elections."""

from __future__ import annotations

import json

import pytest

from checker.allowed import ALLOWED_BECAUSE, because
from checker.cluster.elections import ElectionChecker, partition_of
from checker.cluster.event_log import (
    event_log_paths,
    leader_changes,
    read_event_log,
    read_event_logs,
)
from checker.history.errors import HistoryError
from checker.modes import KRAFT_ELR
from tests.support.queue_histories import Builder

START_MS = 1_700_000_000_000


def config_of(unclean: bool, min_isr: int = 1) -> dict:
    return {"acks": "all", "start_wall_ms": START_MS, "broker_config": {
        "min.insync.replicas": min_isr, "unclean.leader.election.enable": unclean}}


def election(ms_after_start: float, *, unclean: bool, partition: int = 1, old=1, new=2,
             epoch=3) -> dict:
    return {"time": START_MS + int(ms_after_start), "controller_id": 3, "controller_epoch": 7,
            "event": "elect-leader", "topic": "kchaos", "partition": partition,
            "selector": "offline", "old_leader": old, "new_leader": new, "leader_epoch": epoch,
            "isr": [new], "unclean": unclean}


def write_store(tmp_path, events_by_node: dict[str, list[dict]], torn: str = "") -> str:
    for node, events in events_by_node.items():
        directory = tmp_path / "nodes" / node / "data"
        directory.mkdir(parents=True)
        text = "".join(json.dumps(e) + "\n" for e in events) + torn
        (directory / "controller-events.jsonl").write_text(text)
    return str(tmp_path)


def lost_after(b: Builder) -> tuple[Builder, int]:
    """Key 1: value 10 acknowledged by node 1 at offset 0, lost; value 11 read at offset 1."""
    b.send(0, 1, 10, 0, node=1)
    ack_ms = b.time / 1e6
    b.send(0, 1, 11, 1)
    b.poll(5, {1: [(1, 11)]})
    return b, ack_ms


def test_loss_after_an_unclean_election_is_attributed_and_allowed_when_enabled(tmp_path):
    b, ack_ms = lost_after(Builder())
    store = write_store(tmp_path, {
        "n1": [election(ack_ms - 100, unclean=False, old=2, new=1, epoch=2)],
        "n3": [election(ack_ms + 50, unclean=True), election(ack_ms + 90, unclean=False,
                                                             partition=2)]})
    result = ElectionChecker().check(config_of(unclean=True), b.ops, {"store_dir": store})
    assert result.valid is True
    assert result.allowed == ["unclean-election-loss"]
    [witness] = result.anomalies["unclean-election-loss"].examples
    assert witness["value"] == 10 and witness["partition"] == 1
    assert witness["election"]["new_leader"] == 2 and witness["election"]["unclean"] is True
    assert witness["election"]["node"] == "n3"
    assert result.stats["elections"][0]["lost"] == 1


def test_loss_after_an_unclean_election_fails_when_unclean_is_disabled(tmp_path):
    b, ack_ms = lost_after(Builder())
    store = write_store(tmp_path, {"n3": [election(ack_ms + 50, unclean=True)]})
    result = ElectionChecker().check(config_of(unclean=False), b.ops, {"store_dir": store})
    assert result.valid is False
    assert "unclean-election-loss" in result.anomalies


def test_loss_after_a_clean_election_fails_only_if_the_level_promised_no_loss(tmp_path):
    b, ack_ms = lost_after(Builder())
    events = [election(ack_ms + 50, unclean=False)]
    safe = ElectionChecker().check(config_of(False, min_isr=2), b.ops,
                                   {"event_logs": {"n3": _log(tmp_path, events)}})
    assert safe.valid is False and "clean-election-loss" in safe.anomalies
    weak = ElectionChecker().check(config_of(False, min_isr=1), b.ops,
                                   {"event_logs": [_log(tmp_path, events)]})
    assert weak.valid is True and weak.allowed == ["clean-election-loss"]


def test_unexplained_loss_always_fails(tmp_path):
    b, ack_ms = lost_after(Builder())
    store = write_store(tmp_path, {"n3": [election(ack_ms + 50, unclean=True, partition=2)]})
    result = ElectionChecker().check(config_of(unclean=True), b.ops, {"store_dir": store})
    assert result.valid is False
    assert result.anomalies["unexplained-loss"].examples[0]["value"] == 10
    assert result.stats["unexplained"] == 1


def test_a_deposed_leader_that_kept_acknowledging_is_blamed_on_its_deposition():
    from checker.cluster.event_log import ControllerEvent

    b, ack_ms = lost_after(Builder())
    deposed = ControllerEvent(time=START_MS + int(ack_ms) - 500, event="elect-leader",
                              topic="kchaos", partition=1, old_leader=1, new_leader=2,
                              leader_epoch=4, isr=(2,), unclean=True)
    result = ElectionChecker().check(config_of(unclean=True), b.ops,
                                     {"controller_events": [deposed]})
    [witness] = result.anomalies["unclean-election-loss"].examples
    assert witness["election"]["zombie-leader"] is True
    assert result.valid is True


def test_no_losses_is_valid_without_logs_and_missing_clock_is_unknown():
    b = Builder()
    b.send(0, 1, 10, 0)
    b.poll(5, {1: [(0, 10)]})
    assert ElectionChecker().check(config_of(False), b.ops, {}).valid is True
    lossy, _ = lost_after(Builder())
    result = ElectionChecker().check({"acks": "all"}, lossy.ops, {})
    assert result.valid == "unknown" and "start_wall_ms" in result.error


def test_acks_0_sends_are_not_attributed():
    b = Builder()
    b.send(0, 1, 10, 0, acks=0)
    b.send(0, 1, 11, 1, acks=0)
    b.poll(5, {1: [(1, 11)]})
    result = ElectionChecker().check(config_of(False), b.ops, {})
    assert result.valid is True and result.stats["lost-acknowledged"] == 0


def test_key_partitions_map_keys_to_topics():
    test = {"key_partitions": {"7": ["orders", 0]}}
    assert partition_of(test, 7) == ("orders", 0)
    assert partition_of(test, 3) == ("kchaos", 3)


def test_event_logs_skip_a_torn_last_line_and_reject_a_bad_one(tmp_path):
    store = write_store(tmp_path, {"n1": [election(0, unclean=False)]}, torn='{"time": 12')
    logs = read_event_logs(event_log_paths(store))
    assert len(logs.events) == 1 and logs.torn_lines == 1
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(election(0, unclean=False)) + "\n" + '{"event": "x"}\n')
    with pytest.raises(HistoryError, match=r"bad.jsonl:2: .*'time'"):
        read_event_log(bad)


def test_leader_changes_keep_real_changes_once():
    logs = [election(0, unclean=False), election(0, unclean=False),
            election(10, unclean=False, old=2, new=2, epoch=4),
            {"time": START_MS, "event": "isr-change", "topic": "kchaos", "partition": 1}]
    from checker.cluster.event_log import _event

    changes = leader_changes(_event(e, "n1") for e in logs)
    assert list(changes) == [("kchaos", 1)] and len(changes[("kchaos", 1)]) == 1


def _log(tmp_path, events) -> str:
    path = tmp_path / f"events-{len(list(tmp_path.iterdir()))}.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    return str(path)


def test_a_loss_acked_after_the_last_election_by_an_unknown_broker_is_a_presumed_zombie(
        tmp_path):
    b = Builder()
    b.send(0, 1, 10, 0)
    ack_ms = b.time / 1e6
    b.send(0, 1, 11, 1)
    b.poll(5, {1: [(1, 11)]})
    store = write_store(tmp_path, {"n3": [election(ack_ms - 50, unclean=True)]})
    result = ElectionChecker().check(config_of(unclean=True), b.ops, {"store_dir": store})
    assert result.valid is True
    [witness] = result.anomalies["unclean-election-loss"].examples
    assert witness["election"]["zombie-leader"] == "presumed"
    unsafe = ElectionChecker().check(config_of(unclean=False, min_isr=2), b.ops,
                                     {"store_dir": store})
    assert unsafe.valid is False


def test_a_loss_with_no_election_at_all_is_unexplained(tmp_path):
    b, _ = lost_after(Builder())
    store = write_store(tmp_path, {"n3": [election(0, unclean=False, partition=2)]})
    result = ElectionChecker().check(config_of(unclean=True), b.ops, {"store_dir": store})
    assert result.valid is False
    assert "unexplained-loss" in result.anomalies


def test_a_loss_is_blamed_on_the_election_after_a_poll_last_read_it_not_the_first_after_its_ack(
        tmp_path):
    b = Builder()
    b.send(0, 1, 10, 0)
    ack_ms = b.time / 1e6
    b.poll(5, {1: [(0, 10)]})
    b.poll(5, {1: [(0, 10)]})
    read_ms = b.time / 1e6
    b.send(0, 1, 20, 0)
    b.poll(5, {1: [(0, 20)]})
    survived = election(ack_ms + 1, unclean=False, old=1, new=2, epoch=3)
    dropped = election(read_ms + 1, unclean=True, old=2, new=3, epoch=4)
    store = write_store(tmp_path, {"n3": [survived, dropped]})
    result = ElectionChecker().check(config_of(unclean=True), b.ops, {"store_dir": store})
    assert set(result.anomalies) == {"unclean-election-loss"}
    [witness] = result.anomalies["unclean-election-loss"].examples
    assert witness["election"]["leader_epoch"] == 4
    assert witness["last_read_ms"] == START_MS + read_ms


def test_a_read_write_whose_acknowledgement_never_came_is_attributed_from_its_last_read(
        tmp_path):
    b = Builder()
    b.invoke(0, "send", [["send", 1, 10]])
    b.poll(1, {1: [(0, 10)]})
    read_ms = b.time / 1e6
    b.complete(0, "send", "info", [["send", 1, 10]], error="_TRANSPORT")
    b.send(2, 1, 11, 0)
    b.poll(1, {1: [(0, 11)]})
    events = [election(read_ms + 500, unclean=False), election(read_ms + 900, unclean=False,
                                                                 old=2, new=3, epoch=4)]
    result = ElectionChecker().check(config_of(False, min_isr=2), b.ops,
                                     {"event_logs": [_log(tmp_path, events)]})
    assert result.valid is False
    [witness] = result.anomalies["clean-election-loss"].examples
    assert witness["value"] == 10 and "ack_ms" not in witness
    assert witness["election"]["leader_epoch"] == 3, "the first election after the read"
    assert (result.stats["lost-acknowledged"], result.stats["lost-read-unacknowledged"]) == (0, 1)



KAFKA_4_1 = {"db": "kafka", "broker": {"kind": "kafka", "version": "4.1.1", "metadata": "kraft"}}


def from_elr(ms_after_start: float, *, unclean: bool = False) -> dict:
    """A KRaft election whose new leader, 2, was not in the ISR but an eligible leader
    replica, as `harness.db.kafka.metadata_log` writes it."""
    return {**election(ms_after_start, unclean=unclean), "isr": [], "elr": True}


@pytest.mark.parametrize("unclean_line", [False, True])
def test_an_election_from_the_eligible_leader_replicas_is_clean(tmp_path, unclean_line):
    b, ack_ms = lost_after(Builder())
    store = write_store(tmp_path, {"n3": [from_elr(ack_ms + 50, unclean=unclean_line)]})
    [event] = read_event_logs(event_log_paths(store)).events
    assert event.from_eligible_replicas and event.unclean is False
    unclean_on = {**KAFKA_4_1, **config_of(unclean=True, min_isr=2)}
    result = ElectionChecker().check(unclean_on, b.ops, {"store_dir": store})
    assert set(result.anomalies) == {"clean-election-loss"}
    assert result.allowed == ["clean-election-loss"], "allowed as clean: unclean is on"
    [witness] = result.anomalies["clean-election-loss"].examples
    assert witness["election"]["elr"] is True and witness["election"]["unclean"] is False
    assert result.stats["leader-changes-from-elr"] == 1
    assert result.stats["metadata-mode"] == "kraft-elr"


def test_a_loss_after_an_election_from_the_eligible_leader_replicas_fails_a_safe_config(
        tmp_path):
    b, ack_ms = lost_after(Builder())
    store = write_store(tmp_path, {"n3": [from_elr(ack_ms + 50)]})
    safe = {**KAFKA_4_1, **config_of(unclean=False, min_isr=2)}
    result = ElectionChecker().check(safe, b.ops, {"store_dir": store})
    assert result.valid is False and result.allowed == []
    assert set(result.anomalies) == {"clean-election-loss"}


def test_an_isr_change_naming_eligible_leader_replicas_is_no_election():
    from checker.cluster.event_log import _event

    shrink = _event({"time": START_MS, "event": "isr-change", "topic": "kchaos",
                     "partition": 1, "leader": 1, "isr": [1], "elr": [2, 3]}, "n1")
    assert not shrink.from_eligible_replicas and leader_changes([shrink]) == {}


@pytest.mark.parametrize("test", [
    {"db": "kchaos"},
    {"db": "kafka", "broker": {"kind": "kafka", "version": "3.9.1", "metadata": "zookeeper"}},
    {"db": "kafka", "broker": {"kind": "kafka", "version": "4.0.0", "metadata": "kraft"}},
    KAFKA_4_1,
], ids=["kchaos", "kafka-3.9.1", "kafka-4.0.0", "kafka-4.1.1"])
def test_a_clean_election_loss_is_never_allowed_at_min_insync_2_unclean_off(tmp_path, test):
    b, ack_ms = lost_after(Builder())
    events = [election(ack_ms + 50, unclean=False)]
    result = ElectionChecker().check({**test, **config_of(False, min_isr=2)}, b.ops,
                                     {"event_logs": [_log(tmp_path, events)]})
    assert result.valid is False and result.allowed == []


def test_an_allowed_unclean_election_loss_names_the_mode_where_it_changes_the_reason(tmp_path):
    b, ack_ms = lost_after(Builder())
    events = [election(ack_ms + 50, unclean=True)]
    reasons = {}
    for name, test in [("zookeeper", {"db": "kchaos"}),
                       ("kraft", {"db": "kafka", "broker": {"version": "4.0.0",
                                                            "metadata": "kraft"}}),
                       ("kraft-elr", KAFKA_4_1)]:
        result = ElectionChecker().check({**test, **config_of(True, min_isr=2)}, b.ops,
                                         {"event_logs": [_log(tmp_path, events)]})
        assert result.valid is True and result.allowed == ["unclean-election-loss"]
        assert result.stats["metadata-mode"] == name
        reasons[name] = result.stats["allowed-because"]["unclean-election-loss"]
    assert reasons["zookeeper"] == reasons["kraft"] == ALLOWED_BECAUSE["unclean-election-loss"]
    assert reasons["kraft-elr"] == because("unclean-election-loss", mode=KRAFT_ELR)
    assert reasons["kraft-elr"].endswith("(KRaft with eligible leader replicas)")


def test_an_allowed_clean_election_loss_names_every_setting_that_allows_it(tmp_path):
    b, ack_ms = lost_after(Builder())
    events = [election(ack_ms + 50, unclean=False)]
    result = ElectionChecker().check({**KAFKA_4_1, **config_of(True, min_isr=1)}, b.ops,
                                     {"event_logs": [_log(tmp_path, events)]})
    assert result.stats["allowed-because"] == {"clean-election-loss": because(
        "clean-election-loss", "min.insync.replicas=1", "unclean.leader.election.enable=true")}
