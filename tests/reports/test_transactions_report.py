"""The report's transactions section: txn ops by outcome from the history, and the
transaction coordinators' events from the nodes' event logs."""

from __future__ import annotations

import json

from checker.cluster.event_log import read_event_log
from checker.history import Op
from reports.transactions import transactions_section, transactions_view


def txn(index: int, kind: str, error: str | None = None) -> Op:
    return Op(index, index, kind, 1, "txn", [], {"error": error} if error else {})


def test_outcomes_state_changes_and_notable_coordinator_events(tmp_path):
    log = tmp_path / "controller-events.jsonl"
    lines = [
        {"time": 1000, "broker_id": 1, "event": "txn-coordinator-loaded", "txn_partition": 0,
         "coordinator_epoch": 0, "transactions": 0, "prepared": []},
        {"time": 2000, "broker_id": 1, "event": "txn-state", "transactional_id": "t",
         "state": "Ongoing", "cause": "add-partitions"},
        {"time": 2500, "broker_id": 1, "event": "txn-state", "transactional_id": "t",
         "state": "Ongoing", "cause": "add-partitions"},
        {"time": 3000, "broker_id": 2, "event": "txn-fenced", "transactional_id": "t",
         "producer_id": 7, "producer_epoch": 4, "fenced_epoch": 3, "cause": "timeout"},
        {"time": 4000, "broker_id": 2, "event": "txn-coordinator-loaded", "txn_partition": 3,
         "coordinator_epoch": 1, "transactions": 2, "prepared": ["t"]},
        {"time": 4100, "controller_id": 1, "event": "elect-leader", "topic": "k",
         "partition": 0},
    ]
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    events = read_event_log(log, "n2").events
    assert events[3].details["fenced_epoch"] == 3 and "topic" not in events[5].details
    ops = [Op(0, 0, "invoke", 1, "txn", []), txn(1, "ok"), txn(2, "fail", "aborted on purpose"),
           txn(3, "fail", "poll: _TRANSPORT"), txn(4, "info"), txn(5, "ok")]
    view = transactions_view(ops, events)
    assert view.outcomes == {"committed": 2, "aborted on purpose": 1, "failed (aborted)": 1,
                             "unknown": 1}
    assert view.changes == {("Ongoing", "add-partitions"): 2}
    assert [e.event for e in view.notable] == ["txn-fenced", "txn-coordinator-loaded"]
    html = str(transactions_section(view, start_wall_ms=1000.0))
    assert 'id="transactions"' in html and "fenced_epoch=3" in html and "3.000" in html


def test_no_transactions_no_section():
    view = transactions_view([Op(0, 0, "ok", 1, "poll", [])], [])
    assert not view and str(transactions_section(view, None)) == ""
