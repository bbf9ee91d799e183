"""A KRaft cluster's metadata log read as the controller event log, on real logs.

The fixtures in data/kafka_metadata_logs/ are the three nodes' `__cluster_metadata`
segments of one 40 s `kchaos run` each on Kafka 4.2.0, 4.1.1 and 3.9.1 in KRaft mode with
static voters, and on 4.2.0 with a dynamic quorum (`4.2.0-dynamic`, KIP-853)
(`--nemesis kill-leader,kill-controller,isolate-leader --nemesis-interval 6 --seed 7`),
with each node's `node.id` and its server.log's "Becoming the active controller" lines;
`dump.txt` is Kafka's own decoding of one node's segment, the longest (DumpLogSegments
--cluster-metadata-decoder, its first line, the file name, left out): n1's on 4.1.1 and
3.9.1, n3's on 4.2.0 (whose n1 and n2 were killed late in the run and had not caught up)
and on 4.2.0-dynamic."""

from __future__ import annotations

import collections
import json
from pathlib import Path

import pytest

from checker.cluster.event_log import leader_changes, read_event_logs
from harness.db.kafka.distribution import CACHE
from harness.db.kafka.metadata_log import (
    MetadataLogError,
    dump_metadata_log,
    led_epochs,
    metadata_events,
    node_id_of,
    write_metadata_event_log,
)
from tests.support import requirements

DATA = Path(__file__).parent / "data" / "kafka_metadata_logs"
SEGMENT = "00000000000000000000.log"
VERSIONS = ("4.2.0", "4.1.1", "3.9.1", "4.2.0-dynamic")


def jars(fixture: str) -> str:
    """The Kafka version whose jars wrote (and decode) `fixture`."""
    return fixture.split("-")[0]


def dumped_node(version: str) -> Path:
    """The fixture's node whose segment `dump.txt` decodes: the one with the longest log
    (a node killed near the end of the run has not caught up)."""
    return next(path.parent for path in sorted((DATA / version).glob("*/dump.txt")))


def dumped(version: str) -> str:
    return (dumped_node(version) / "dump.txt").read_text()


def kinds(events: list[dict]) -> collections.Counter:
    return collections.Counter(event["event"] for event in events)


def test_4_1_1_names_each_epochs_leader_and_its_elections_from_the_elr_and_unclean():
    events = metadata_events(dumped("4.1.1"))
    tenures = [(e["controller_id"], e["controller_epoch"]) for e in events
               if e["event"] == "become-controller"]
    assert tenures == [(2, 1), (1, 2), (3, 3), (2, 4)]
    workload = [e for e in events if e.get("topic") == "kchaos"]
    first = [e for e in workload if e["event"] == "new-partition" and e["partition"] == 0]
    assert first == [{"time": 1795916963849, "controller_id": 2, "controller_epoch": 1,
                      "event": "new-partition", "topic": "kchaos", "partition": 0,
                      "old_leader": -1, "new_leader": 3, "leader_epoch": 0,
                      "isr": [3, 1, 2]}]
    offline = [e for e in workload if e["event"] == "leader-offline" and e["partition"] == 0]
    assert [(e["old_leader"], e["isr"], e["elr"]) for e in offline] == [(3, [], [1, 3])]
    # every replica of partition 0 died; the last one back was elected although it had
    # left the ISR and, restarted after an unclean shutdown, the ELR: Kafka marks the
    # election RECOVERING, an unclean one, with unclean.leader.election.enable=false
    [recovered] = [e for e in workload if e["event"] == "elect-leader"
                   and e["partition"] == 0 and e["old_leader"] == -1]
    assert (recovered["new_leader"], recovered["unclean"], recovered["elr"]) == (3, True, False)
    assert recovered["selector"] == "offline"
    clean = [e for e in workload if e["event"] == "elect-leader" and not e["unclean"]]
    assert clean and all(e["selector"] == "offline" for e in clean)


def test_leader_epochs_count_every_leader_change_of_a_partition():
    events = [e for e in metadata_events(dumped("4.1.1"))
              if e.get("topic") == "kchaos" and e.get("partition") == 2
              and e["event"] in ("new-partition", "elect-leader", "leader-offline")]
    assert [e["leader_epoch"] for e in events] == list(range(len(events)))
    assert [e["new_leader"] for e in events] == [2, 3, 1, 3, -1, 3]


@pytest.mark.parametrize("version", VERSIONS)
def test_each_decision_is_in_the_log_of_the_node_that_led_its_epoch(version):
    everything = metadata_events(dumped(version))
    per_node = []
    for node in ("n1", "n2", "n3"):
        directory = DATA / version / node
        node_id = node_id_of(directory / "server.properties")
        led = led_epochs((directory / "server.log").read_text(), node_id)
        per_node += metadata_events(dumped(version), node_id, led)
    decisions = [e for e in everything if e["event"] != "become-controller"]
    assert sorted(map(json.dumps, [e for e in per_node if e["event"] != "become-controller"])
                  ) == sorted(map(json.dumps, [{**e, "controller_id": _leader(per_node, e)}
                                                for e in decisions]))
    assert all(e["controller_id"] is not None for e in per_node)


def _leader(per_node: list[dict], event: dict) -> int:
    return next(e["controller_id"] for e in per_node
                if e["event"] == "become-controller"
                and e["controller_epoch"] == event["controller_epoch"])


def test_3_9_1_prints_no_leader_ids_and_the_server_logs_name_them():
    assert "LeaderChange:" not in dumped("3.9.1")
    assert "controlType: LEADER_CHANGE(2)" in dumped("3.9.1")
    assert not [e for e in metadata_events(dumped("3.9.1")) if e["event"] == "become-controller"]
    assert led_epochs((DATA / "3.9.1" / "n2" / "server.log").read_text(), 2) == {1, 5}
    assert led_epochs((DATA / "3.9.1" / "n2" / "server.log").read_text(), 3) == set()


def test_a_dynamic_quorums_voter_records_are_not_decisions():
    text = dumped("4.2.0-dynamic")
    assert 'KRaftVersion {"version":0,"kRaftVersion":1}' in text
    assert "KRaftVoters {" in text and '"voterDirectoryId"' in text
    events = metadata_events(text)
    tenures = [(e["controller_id"], e["controller_epoch"]) for e in events
               if e["event"] == "become-controller"]
    assert [epoch for _, epoch in tenures] == list(range(1, len(tenures) + 1))
    assert kinds(events)["new-partition"] > 0 and kinds(events)["elect-leader"] > 0


def test_broker_fencing_and_unfencing_are_broker_changes():
    events = [e for e in metadata_events(dumped("4.1.1")) if e["event"] == "broker-change"]
    assert [e["new"] for e in events[:3]] == [[2], [3], [1]]
    assert {b for e in events for b in e["dead"]} == {1, 2, 3}


def test_a_record_that_is_not_json_is_an_error_naming_its_offset():
    text = dumped("4.1.1").replace('payload: {"type":"TOPIC_RECORD"', 'payload: {"type"::', 1)
    with pytest.raises(ValueError, match="offset"):
        metadata_events(text)


@requirements.kafka_jars("4.2.0")
@requirements.kafka_jars("4.1.1")
@requirements.kafka_jars("3.9.1")
@pytest.mark.parametrize("version", VERSIONS)
def test_kafkas_decoder_reads_the_segments_and_the_checker_reads_the_events(version,
                                                                         tmp_path):
    libs = str(CACHE / jars(version) / "libs")
    assert dump_metadata_log(dumped_node(version) / SEGMENT, libs).splitlines()[1:] == \
        dumped(version).splitlines()
    paths = {}
    for node in ("n1", "n2", "n3"):
        directory = tmp_path / node
        directory.mkdir()
        for name in ("server.properties", "server.log"):
            (directory / name).write_text((DATA / version / node / name).read_text())
        paths[node] = write_metadata_event_log(directory, DATA / version / node / SEGMENT,
                                               libs)
    logs = read_event_logs(paths)
    assert logs.torn_lines == 0
    decisions = [e for e in metadata_events(dumped(version)) if e["event"] != "become-controller"]
    assert kinds([e for e in decisions]) == kinds(
        [{"event": e.event} for e in logs.events if e.event != "become-controller"])
    moves = leader_changes(logs.events)
    assert moves[("kchaos", 2)], moves


@requirements.kafka_jars("4.1.1")
def test_a_segment_the_decoder_cannot_read_is_an_error_naming_it(tmp_path):
    broken = tmp_path / SEGMENT
    broken.write_bytes(b"\x00" * 7)
    with pytest.raises(MetadataLogError, match=SEGMENT):
        dump_metadata_log(broken, str(tmp_path / "no-such-libs"))
