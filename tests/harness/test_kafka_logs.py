"""Apache Kafka's controller.log and state-change.log read as the controller event log.

The fixtures are real logs of 3-broker clusters (`kchaos cluster up --db kafka
--kafka-version V --nodes 3 --zookeepers 1` with unclean.leader.election.enable=true,
min.insync.replicas=1, auto.leader.rebalance.enable=true,
leader.imbalance.check.interval.seconds=5, leader.imbalance.per.broker.percentage=0),
trimmed to the controller's lines and those about topic `t` (2 partitions, 3
replicas, written to with acks=all throughout), and cut in two windows. "failover":
kill -9 of t-0's leader and its restart (a preferred election moves t-0 back), a
graceful stop of t-1's leader (controlled shutdown) and its restart, a reassignment
of t-1 away from its leader and back. "unclean", from the SIGSTOP of a follower on:
it loses its ZooKeeper session and leaves the ISR, the two other brokers are killed
-9, it resumes, becomes controller and leader of both partitions uncleanly; the
others restart.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from checker.cluster.event_log import leader_changes, read_event_log, read_event_logs
from harness.db.kafka.logs import LeaderState, controller_events, leader_state, write_event_log

DATA = Path(__file__).parent / "data" / "kafka_logs"
VERSIONS = ("3.9.1", "2.8.2", "2.0.1", "0.11.0.3", "0.10.2.2")


def node_events(version: str, scenario: str, node: str) -> list[dict]:
    folder = DATA / version / scenario / node
    texts = [(folder / name).read_text() if (folder / name).is_file() else ""
             for name in ("controller.log", "state-change.log")]
    return controller_events(*texts)


def of_kind(events: list[dict], kind: str) -> list[dict]:
    return [e for e in events if e["event"] == kind]


def move(event: dict) -> tuple:
    return (event["partition"], event["old_leader"], event["new_leader"],
            event["leader_epoch"], event["selector"], event["unclean"])


# -- single lines ---------------------------------------------------------------------------

@pytest.mark.parametrize("text, expected", [
    ("LeaderAndIsr(leader=2, leaderEpoch=7, isrWithBrokerEpoch=List(BrokerState(brokerId=2, "
     "brokerEpoch=-1)), leaderRecoveryState=RECOVERING, partitionEpoch=11)",
     LeaderState(2, 7, (2,), True)),
    ("LeaderAndIsr(leader=2, leaderEpoch=1, isr=List(2, 1), zkVersion=1)",
     LeaderState(2, 1, (2, 1))),
    ("LeaderAndIsrPartitionState(topicName='t', partitionIndex=1, controllerEpoch=2, "
     "leader=3, leaderEpoch=7, isr=[3], partitionEpoch=9, replicas=[3, 1, 2], "
     "addingReplicas=[], removingReplicas=[], isNew=false, leaderRecoveryState=1)",
     LeaderState(3, 7, (3,), True)),
    ("PartitionState(controllerEpoch=1, leader=2, leaderEpoch=4, isr=3,2, zkVersion=6, "
     "replicas=2,1,3, isNew=false)", LeaderState(2, 4, (3, 2))),
    ("(Leader:-1,ISR:3,LeaderRecoveryState:RECOVERED,LeaderEpoch:11,ZkVersion:13,"
     "ControllerEpoch:3)", LeaderState(-1, 11, (3,))),
    ('{"leader":1,"leader_epoch":10,"isr":[1]}', LeaderState(1, 10, (1,))),
    ("[3,1,2]", LeaderState(None, None, (3, 1, 2))),
])
def test_leader_state_reads_every_rendering_of_kafka_versions(text, expected):
    assert leader_state(text) == expected


def test_lines_of_other_loggers_brokers_and_stack_traces_are_no_events():
    # n1 of this 3.9.1 run was never the controller: its lines are its broker's own
    assert node_events("3.9.1", "failover", "n1") == []
    lines = (DATA / "0.11.0.3" / "failover" / "n2" / "controller.log").read_text().splitlines()
    warning = next(i for i, line in enumerate(lines) if "was unsuccessful" in line)
    trace = lines[warning:warning + 4]
    assert trace[1].startswith("java.io.IOException") and trace[3].startswith("\tat ")
    assert controller_events("\n".join(trace)) == []


# -- what each version's controller did -----------------------------------------------------

@pytest.mark.parametrize("version, node, expected", [
    ("3.9.1", "n2", [("become-controller", 2, 1), ("resign", 2, 1)]),
    ("3.9.1", "n3", [("become-controller", 3, 2)]),
    ("2.8.2", "n2", [("become-controller", 2, 1)]),
    ("2.0.1", "n2", [("become-controller", 2, 1), ("resign", 2, 1)]),
    ("2.0.1", "n3", [("become-controller", 3, 2)]),
    ("0.11.0.3", "n2", [("become-controller", 2, 1), ("resign", 2, 1)]),
    ("0.11.0.3", "n3", [("become-controller", 3, 2)]),
    ("0.10.2.2", "n2", [("become-controller", 2, 1), ("resign", 2, 1)]),
    ("0.10.2.2", "n1", [("become-controller", 1, 2)]),
])
def test_controller_tenures_with_their_epochs(version, node, expected):
    events = node_events(version, "failover", node)
    tenures = [(e["event"], e["controller_id"], e["controller_epoch"]) for e in events
               if e["event"] in ("become-controller", "resign")]
    assert tenures == expected
    assert all(e["controller_id"] == expected[0][1] for e in events)


def test_resign_is_an_event_only_for_the_acting_controller():
    # 3.9.1's n2 resigned as controller when stopped gracefully; restarted, then paused
    # (SIGSTOP) as a plain broker, it logged "Resigned" again when its session expired
    controller_log, state_change_log = (
        "".join((DATA / "3.9.1" / scenario / "n2" / name).read_text()
                for scenario in ("failover", "unclean"))
        for name in ("controller.log", "state-change.log"))
    assert controller_log.count("] Resigned ") == 2
    events = controller_events(controller_log, state_change_log)
    assert [(e["event"], e["controller_epoch"]) for e in events
            if e["event"] in ("become-controller", "resign")] == [
        ("become-controller", 1), ("resign", 1), ("become-controller", 3)]


@pytest.mark.parametrize("version, expected", [  # (new, dead, bounced) seen by n2
    ("3.9.1", [([3], [], []), ([], [1], []), ([1], [], [])]),
    ("2.8.2", [([1], [], []), ([3], [], []), ([], [3], []), ([3], [], []), ([], [1], []),
               ([1], [], [])]),
    ("2.0.1", [([1, 3], [], []), ([], [3], []), ([3], [], [])]),
    ("0.11.0.3", [([2], [], []), ([3], [], []), ([1], [], []), ([], [3], []), ([3], [], [])]),
    ("0.10.2.2", [([2], [], []), ([1], [], []), ([3], [], []), ([], [3], []), ([3], [], [])]),
])
def test_broker_changes(version, expected):
    changes = of_kind(node_events(version, "failover", "n2"), "broker-change")
    assert [(e["new"], e["dead"], e["bounced"]) for e in changes] == expected


@pytest.mark.parametrize("version", VERSIONS)
def test_a_clean_failover_after_kill_9_of_the_leader(version):
    events = node_events(version, "failover", "n2")
    kill = next(e for e in of_kind(events, "elect-leader") if e["selector"] == "offline")
    dead = next(e for e in of_kind(events, "broker-change") if e["dead"])
    assert dead["time"] <= kill["time"] < dead["time"] + 1000
    assert kill["old_leader"] == dead["dead"][0] != kill["new_leader"]
    assert kill["leader_epoch"] == 1 and kill["unclean"] is False
    assert kill["new_leader"] in kill["isr"] and dead["dead"][0] not in kill["isr"]


FAILOVER_MOVES = {  # (partition, old leader, new leader, leader epoch, selector, unclean)
    "3.9.1": [(0, 1, 2, 1, "offline", False), (0, 2, 1, 2, "preferred", False),
              (1, 2, 3, 2, "controlled-shutdown", False), (1, 3, 2, 3, "preferred", False),
              (1, 2, 1, 4, "reassigned", False), (1, 1, 2, 8, "preferred", False)],
    "2.8.2": [(0, 3, 2, 1, "offline", False), (0, 2, 3, 2, "preferred", False),
              (1, 1, 3, 2, "controlled-shutdown", False), (1, 3, 1, 3, "preferred", False),
              (1, 1, 2, 4, "reassigned", False), (1, 2, 1, 8, "preferred", False)],
    "2.0.1": [(0, 3, 2, 1, "offline", False), (0, 2, 3, 2, "preferred", False),
              (1, 2, 1, 2, "controlled-shutdown", False), (1, 1, 2, 3, "preferred", False),
              (1, 2, 1, 4, "reassigned", False), (1, 1, 2, 8, "preferred", False)],
    "0.11.0.3": [(0, 3, 2, 1, "offline", False), (0, 2, 3, 2, "preferred", False),
                 (1, 2, 1, 2, "controlled-shutdown", False), (1, 1, 2, 3, "preferred", False),
                 (1, 2, 1, 4, "reassigned", False), (1, 1, 2, 8, "preferred", False)],
    "0.10.2.2": [(0, 3, 1, 1, "offline", False), (0, 1, 3, 2, "preferred", False),
                 (1, 2, 3, 2, "controlled-shutdown", False), (1, 3, 2, 3, "preferred", False),
                 (1, 2, 1, 4, "reassigned", False), (1, 1, 2, 8, "preferred", False)],
}
UNCLEAN_MOVES = {  # None: the window starts within that controller's tenure
    "3.9.1": [(0, -1, 2, 7, "offline", True), (0, 2, 1, 8, "preferred", False),
              (1, None, 1, 9, "offline", False), (1, -1, 2, 12, "offline", True)],
    "2.8.2": [(0, -1, 1, 7, "offline", True), (0, 1, 3, 8, "preferred", False),
              (1, None, 2, 9, "offline", False), (1, -1, 1, 12, "offline", True)],
    "2.0.1": [(0, 3, 1, 5, "offline", True), (0, 1, 3, 6, "preferred", False),
              (1, 2, 1, 10, "offline", True), (1, 1, 2, 11, "preferred", False)],
    "0.11.0.3": [(0, 3, 1, 5, "offline", True), (0, 1, 3, 6, "preferred", False),
                 (1, 2, 1, 10, "offline", True), (1, 1, 2, 11, "preferred", False)],
    "0.10.2.2": [(0, 3, 2, 5, "offline", True), (0, 2, 3, 6, "preferred", False),
                 (1, None, 1, 9, "offline", False), (1, 1, 2, 10, "offline", True)],
}


@pytest.mark.parametrize("scenario, expected", [("failover", FAILOVER_MOVES),
                                                ("unclean", UNCLEAN_MOVES)])
@pytest.mark.parametrize("version", VERSIONS)
def test_leader_changes_of_all_nodes_logs_are_the_runs_leader_moves(version, scenario,
                                                                     expected, tmp_path):
    logs = {}
    for source in sorted((DATA / version / scenario).iterdir()):
        shutil.copytree(source, tmp_path / source.name)
        logs[source.name] = write_event_log(tmp_path / source.name)
    changes = leader_changes(read_event_logs(logs).events)
    assert set(changes) == {("t", 0), ("t", 1)}
    moves = [move(e.to_json()) for tp in sorted(changes) for e in changes[tp]]
    assert moves == expected[version]


@pytest.mark.parametrize("version", VERSIONS)
def test_a_new_partition_gets_its_first_replica_as_leader(version):
    created = of_kind(node_events(version, "failover", "n2"), "new-partition")
    assert sorted(e["partition"] for e in created) == [0, 1]
    for event in created:
        assert (event["old_leader"], event["leader_epoch"], event["selector"]) == (-1, 0, None)
        assert event["isr"][0] == event["new_leader"] and len(event["isr"]) == 3


@pytest.mark.parametrize("version, node, partition, old_leader, new_leader, epoch", [
    ("3.9.1", "n2", 1, -1, 2, 12), ("3.9.1", "n2", 0, -1, 2, 7),
    ("2.8.2", "n1", 1, -1, 1, 12), ("2.8.2", "n1", 0, -1, 1, 7),
    ("2.0.1", "n1", 1, 2, 1, 10), ("2.0.1", "n1", 0, 3, 1, 5),
    ("0.11.0.3", "n1", 1, 2, 1, 10), ("0.11.0.3", "n1", 0, 3, 1, 5),
    ("0.10.2.2", "n2", 1, 1, 2, 10), ("0.10.2.2", "n2", 0, 3, 2, 5),
])
def test_the_unclean_election_is_flagged(version, node, partition, old_leader, new_leader,
                                         epoch):
    events = node_events(version, "unclean", node)
    assert events[0]["event"] == "become-controller"
    elected = [e for e in of_kind(events, "elect-leader") if e["partition"] == partition]
    first = elected[0]
    assert move(first) == (partition, old_leader, new_leader, epoch, "offline", True)
    assert first["isr"] == [new_leader]
    # the partition is back to clean elections once the others have caught up
    assert all(e["unclean"] is False for e in elected[1:])
    assert not any(e.get("unclean") for e in events if e["event"] != "elect-leader")


def test_an_offline_election_within_the_isr_is_clean():
    # 3.9.1: the stopped broker 2 lost its ZooKeeper session: t-1 moved to 1, in its ISR
    events = node_events("3.9.1", "unclean", "n3")
    [elected] = of_kind(events, "elect-leader")
    assert elected["selector"] == "offline" and elected["unclean"] is False
    assert (elected["new_leader"], elected["leader_epoch"], elected["isr"]) == (1, 9, [3, 1])
    # the window starts in the middle of this controller's tenure: its old leader is unknown
    assert elected["old_leader"] is None


@pytest.mark.parametrize("version, node", [("3.9.1", "n2"), ("2.8.2", "n1")])
def test_the_dead_leaders_leave_the_isr_before_the_unclean_election(version, node):
    events = node_events(version, "unclean", node)
    offline = [e for e in of_kind(events, "leader-offline") if e["partition"] == 0]
    elected = next(e for e in of_kind(events, "elect-leader") if e["partition"] == 0)
    assert offline and all(e["new_leader"] == -1 and e["time"] < elected["time"]
                           for e in offline)
    assert offline[-1]["isr"] != [elected["new_leader"]]
    assert elected["old_leader"] == -1


@pytest.mark.parametrize("version, node, partition, isrs", [
    ("3.9.1", "n2", 1, [[2, 1], [2, 1, 3]]),  # AlterPartition, `ISR for partition ...`
    ("2.8.2", "n1", 0, [[1, 3], [1, 3, 2]]),  # AlterIsr, `... updated to [1,3,2] ...`
    ("0.10.2.2", "n2", 0, [[2, 1]]),  # from the UpdateMetadata the controller sent
])
def test_isr_changes_of_the_new_leader_as_its_followers_catch_up(version, node, partition,
                                                                 isrs):
    events = node_events(version, "unclean", node)
    leader = next(e for e in of_kind(events, "elect-leader")
                  if e["partition"] == partition)["new_leader"]
    changes = [e for e in of_kind(events, "isr-change") if e["partition"] == partition]
    assert [e["isr"] for e in changes][:len(isrs)] == isrs
    assert all(e["old_leader"] == e["new_leader"] == leader for e in changes[:len(isrs)])


def test_controller_log_and_state_change_log_are_merged_by_time():
    events = node_events("3.9.1", "failover", "n2")
    assert [e["time"] for e in events] == sorted(e["time"] for e in events)
    shutdown = of_kind(events, "controlled-shutdown")[0]  # from controller.log
    moved = next(e for e in events if e.get("selector") == "controlled-shutdown")
    assert shutdown["broker_id"] == moved["old_leader"] == 2
    assert shutdown["time"] < moved["time"] < shutdown["time"] + 100


def test_reassignment_bumps_the_leader_epoch():
    events = node_events("3.9.1", "failover", "n3")
    bumps = of_kind(events, "bump-leader-epoch")
    assert [(e["partition"], e["new_leader"], e["leader_epoch"]) for e in bumps] == [
        (1, 1, 6), (1, 1, 7)]


# -- the file the checkers read ---------------------------------------------------------------

def test_write_event_log_is_read_back_by_the_checker(tmp_path):
    node_dir = tmp_path / "n1"
    shutil.copytree(DATA / "2.8.2" / "unclean" / "n1", node_dir)
    path = write_event_log(node_dir)
    assert path == node_dir / "controller-events.jsonl"
    logs = read_event_log(path, "n1")
    assert logs.torn_lines == 0
    fields = ("time", "event", "controller_id", "controller_epoch", "topic", "partition",
              "selector", "old_leader", "new_leader", "leader_epoch", "isr")
    assert [{k: e.to_json()[k] for k in fields} for e in logs.events] == [
        {k: e.get(k) for k in fields} for e in node_events("2.8.2", "unclean", "n1")]
    unclean = [(e.topic, e.partition, e.new_leader) for e in logs.events if e.unclean]
    assert unclean == [("t", 1, 1), ("t", 0, 1)]


def test_write_event_log_needs_one_of_the_two_logs(tmp_path):
    with pytest.raises(FileNotFoundError):
        write_event_log(tmp_path)
    shutil.copy(DATA / "2.0.1" / "unclean" / "n1" / "state-change.log", tmp_path)
    events = read_event_log(write_event_log(tmp_path)).events
    # without controller.log: no become-controller nor broker changes, the elections remain
    assert {e.event for e in events} == {"elect-leader"}
    assert [(e.partition, e.new_leader, e.controller_id, e.controller_epoch, e.unclean)
            for e in events][:2] == [(1, 1, 1, 3, True), (0, 1, 1, 3, True)]
