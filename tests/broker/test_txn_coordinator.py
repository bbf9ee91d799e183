"""The transaction coordinator's state machine (broker/txn), on the event loop with an
in-memory transaction log and marker writer (no process boundary is crossed: the real
log and markers are exercised by tests/broker/test_transactions_cluster.py)."""

from __future__ import annotations

import asyncio
import json

import pytest

from broker.errors import ErrorCode
from broker.event_log import EventLog
from broker.group.placement import partition_for
from broker.txn import TransactionCoordinator, TxnConfig
from broker.txn.records import decode, encode_key, encode_value
from broker.txn.state import IllegalTransition, TxnMetadata, TxnState

PARTITIONS = 4
TOPIC_A = frozenset({("a", 0), ("a", 1)})


class MemoryLog:
    """The transaction log as the coordinator sees it: appends answered with `code`."""

    def __init__(self) -> None:
        self.appended: list[TxnMetadata] = []
        self.code = ErrorCode.NONE
        self.stored: dict[int, dict[str, TxnMetadata]] = {}

    async def append(self, index: int, metadata: TxnMetadata) -> int:
        await asyncio.sleep(0)
        if self.code == ErrorCode.NONE:
            self.appended.append(metadata)
        return self.code

    async def load(self, index: int, epoch: int):
        await asyncio.sleep(0)
        return dict(self.stored.get(index, {}))


class Markers:
    def __init__(self) -> None:
        self.written: list[tuple[int, int, bool, int, frozenset]] = []

    async def write(self, producer_id, producer_epoch, commit, coordinator_epoch, partitions,
                    go_on) -> bool:
        await asyncio.sleep(0)
        if not go_on():
            return False
        self.written.append((producer_id, producer_epoch, commit, coordinator_epoch,
                             frozenset(partitions)))
        return True

    async def close(self) -> None:
        pass


class Ids:
    def __init__(self) -> None:
        self.next = 1000

    async def allocate(self) -> int:
        self.next += 1
        return self.next


def make(tmp_path, skip_fencing: bool = False, owned: bool = True):
    store, markers = MemoryLog(), Markers()
    coordinator = TransactionCoordinator(
        1, store, markers, lambda tid: partition_for(tid, PARTITIONS),
        lambda group: partition_for(group, 3), Ids().allocate,
        TxnConfig(max_timeout_ms=60000, skip_epoch_fencing=skip_fencing),
        EventLog(tmp_path / "events.jsonl", broker_id=1))
    if owned:
        coordinator.owned = dict.fromkeys(range(PARTITIONS), 5)
    return coordinator, store, markers


def events(tmp_path) -> list[dict]:
    return [json.loads(line) for line in (tmp_path / "events.jsonl").read_text().splitlines()]


async def settle() -> None:
    for _ in range(20):
        await asyncio.sleep(0)


def run(coroutine):
    return asyncio.run(coroutine)


def test_init_producer_id_allocates_then_bumps_the_epoch(tmp_path):
    async def scenario():
        coordinator, store, _ = make(tmp_path)
        first = await coordinator.init_producer_id("t1", 30000, None)
        second = await coordinator.init_producer_id("t1", 30000, None)
        return first, second, store.appended

    first, second, appended = run(scenario())
    assert first == (ErrorCode.NONE, 1001, 0)
    assert second == (ErrorCode.NONE, 1001, 1)
    assert [m.state for m in appended] == [TxnState.EMPTY, TxnState.EMPTY]
    states = [e for e in events(tmp_path) if e["event"] == "txn-state"]
    assert [(e["producer_epoch"], e["previous_epoch"]) for e in states] == [(0, -1), (1, 0)]


def test_bad_requests_get_kafka_errors(tmp_path):
    async def scenario():
        coordinator, _, _ = make(tmp_path)
        return [await coordinator.init_producer_id("", 1000, None),
                await coordinator.init_producer_id("t", 60001, None),
                await coordinator.init_producer_id("t", 0, None),
                await coordinator.add_partitions("unknown", 1, 0, TOPIC_A),
                await coordinator.end_txn("unknown", 1, 0, True)]

    results = run(scenario())
    assert [r[0] for r in results[:3]] == [ErrorCode.INVALID_REQUEST,
                                            ErrorCode.INVALID_TRANSACTION_TIMEOUT,
                                            ErrorCode.INVALID_TRANSACTION_TIMEOUT]
    assert results[3:] == [ErrorCode.INVALID_PRODUCER_ID_MAPPING] * 2


def test_commit_writes_prepare_then_markers_then_complete(tmp_path):
    async def scenario():
        coordinator, store, markers = make(tmp_path)
        _, pid, epoch = await coordinator.init_producer_id("t", 30000, None)
        added = await coordinator.add_partitions("t", pid, epoch, TOPIC_A)
        again = await coordinator.add_partitions("t", pid, epoch, frozenset({("a", 0)}))
        offsets = await coordinator.add_offsets("t", pid, epoch, "g")
        ended = await coordinator.end_txn("t", pid, epoch, True)
        await settle()
        retry = await coordinator.end_txn("t", pid, epoch, True)
        wrong = await coordinator.end_txn("t", pid, epoch, False)
        return added, again, offsets, ended, retry, wrong, store.appended, markers.written

    added, again, offsets, ended, retry, wrong, appended, written = run(scenario())
    assert (added, again, offsets, ended, retry) == (ErrorCode.NONE,) * 5
    assert wrong == ErrorCode.INVALID_TXN_STATE
    assert [m.state for m in appended] == [TxnState.EMPTY, TxnState.ONGOING, TxnState.ONGOING,
                                           TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT]
    partitions = TOPIC_A | {("__consumer_offsets", partition_for("g", 3))}
    assert appended[3].partitions == partitions and not appended[4].partitions
    assert written == [(1001, 0, True, 5, partitions)]
    assert any(e["event"] == "txn-markers-written" for e in events(tmp_path))


def test_end_txn_outside_a_transaction_is_refused(tmp_path):
    async def scenario():
        coordinator, _, _ = make(tmp_path)
        _, pid, epoch = await coordinator.init_producer_id("t", 30000, None)
        return await coordinator.end_txn("t", pid, epoch, True)

    assert run(scenario()) == ErrorCode.INVALID_TXN_STATE


def test_a_new_producer_fences_the_ongoing_transaction_and_the_zombie(tmp_path):
    async def scenario():
        coordinator, store, markers = make(tmp_path)
        _, pid, old = await coordinator.init_producer_id("t", 30000, None)
        await coordinator.add_partitions("t", pid, old, TOPIC_A)
        fencing = await coordinator.init_producer_id("t", 30000, None)
        await settle()
        code, _, new = await coordinator.init_producer_id("t", 30000, None)
        zombie_add = await coordinator.add_partitions("t", pid, old, TOPIC_A)
        zombie_end = await coordinator.end_txn("t", pid, old, True)
        return fencing, (code, new), zombie_add, zombie_end, store.appended, markers.written

    fencing, (code, new), zombie_add, zombie_end, appended, written = run(scenario())
    assert fencing[0] == ErrorCode.CONCURRENT_TRANSACTIONS
    assert written == [(1001, 1, False, 5, TOPIC_A)]
    assert appended[2].state is TxnState.PREPARE_ABORT and appended[2].producer_epoch == 1
    assert (code, new) == (ErrorCode.NONE, 2)
    assert zombie_add == zombie_end == ErrorCode.PRODUCER_FENCED
    fenced = [e for e in events(tmp_path) if e["event"] == "txn-fenced"]
    assert fenced[0]["fenced_epoch"] == 0 and fenced[0]["producer_epoch"] == 1


def test_skip_epoch_fencing_lets_a_zombie_commit(tmp_path):
    async def scenario():
        coordinator, _, markers = make(tmp_path, skip_fencing=True)
        _, pid, old = await coordinator.init_producer_id("t", 30000, None)
        zombie_add = await coordinator.add_partitions("t", pid, old, TOPIC_A)
        successor = await coordinator.init_producer_id("t", 30000, None)
        zombie_end = await coordinator.end_txn("t", pid, old, True)
        await settle()
        return zombie_add, successor, zombie_end, markers.written

    zombie_add, successor, zombie_end, written = run(scenario())
    assert successor == (ErrorCode.NONE, 1001, 1)
    assert zombie_add == zombie_end == ErrorCode.NONE
    assert written == [(1001, 1, True, 5, TOPIC_A)]
    assert any(e["event"] == "txn-fencing-skipped" for e in events(tmp_path))


def test_kip_360_retry_gets_the_same_epoch_and_an_older_one_is_fenced(tmp_path):
    async def scenario():
        coordinator, _, _ = make(tmp_path)
        _, pid, epoch = await coordinator.init_producer_id("t", 30000, None)
        bumped = await coordinator.init_producer_id("t", 30000, (pid, epoch))
        retried = await coordinator.init_producer_id("t", 30000, (pid, epoch))
        stale = await coordinator.init_producer_id("t", 30000, (pid + 7, 0))
        return bumped, retried, stale

    bumped, retried, stale = run(scenario())
    assert bumped == (ErrorCode.NONE, 1001, 1)
    assert retried == (ErrorCode.NONE, 1001, 1)
    assert stale[0] == ErrorCode.PRODUCER_FENCED


def test_a_failed_append_changes_nothing(tmp_path):
    async def scenario():
        coordinator, store, _ = make(tmp_path)
        _, pid, epoch = await coordinator.init_producer_id("t", 30000, None)
        store.code = ErrorCode.COORDINATOR_NOT_AVAILABLE
        failed = await coordinator.add_partitions("t", pid, epoch, TOPIC_A)
        state = coordinator.entries["t"].metadata.state
        return failed, state

    assert run(scenario()) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, TxnState.EMPTY)


def test_requests_during_a_write_or_a_prepare_are_concurrent(tmp_path):
    async def scenario():
        coordinator, _, _ = make(tmp_path)
        _, pid, epoch = await coordinator.init_producer_id("t", 30000, None)
        await coordinator.add_partitions("t", pid, epoch, TOPIC_A)
        writing = asyncio.ensure_future(coordinator.end_txn("t", pid, epoch, True))
        await asyncio.sleep(0)
        during = await coordinator.add_partitions("t", pid, epoch, frozenset({("b", 0)}))
        init = await coordinator.init_producer_id("t", 30000, None)
        await writing
        return during, init[0]

    assert run(scenario()) == (ErrorCode.CONCURRENT_TRANSACTIONS,) * 2


def test_timed_out_transactions_are_aborted_with_a_bumped_epoch(tmp_path):
    async def scenario():
        coordinator, _, markers = make(tmp_path)
        _, pid, epoch = await coordinator.init_producer_id("t", 1000, None)
        await coordinator.add_partitions("t", pid, epoch, TOPIC_A)
        start = coordinator.entries["t"].metadata.start_ms
        early = coordinator.abort_timed_out(start + 999)
        late = coordinator.abort_timed_out(start + 1001)
        await settle()
        late_end = await coordinator.end_txn("t", pid, epoch, True)
        return early, late, markers.written, coordinator.entries["t"].metadata, late_end

    early, late, written, metadata, late_end = run(scenario())
    assert early == [] and late == ["t"]
    assert written == [(1001, 1, False, 5, TOPIC_A)]
    assert metadata.state is TxnState.COMPLETE_ABORT and metadata.producer_epoch == 1
    assert late_end == ErrorCode.PRODUCER_FENCED


def test_loading_finishes_prepared_transactions_and_answers_load_in_progress(tmp_path):
    prepared = TxnMetadata("t", 77, 3, 30000, TxnState.PREPARE_ABORT, TOPIC_A, 1, 2)
    ongoing = TxnMetadata("u", 78, 0, 30000, TxnState.ONGOING, TOPIC_A, 1, 2)

    async def scenario():
        coordinator, store, markers = make(tmp_path, owned=False)
        index = partition_for("t", PARTITIONS)
        store.stored[index] = {"t": prepared}
        if partition_for("u", PARTITIONS) == index:
            store.stored[index]["u"] = ongoing
        coordinator.on_leader(index, 9)
        during = coordinator.owner_error("t")
        await settle()
        other = next(i for i in range(PARTITIONS) if i != index)
        stranger = next(f"x{n}" for n in range(100) if partition_for(f"x{n}", PARTITIONS) == other)
        after = (coordinator.owner_error("t"), coordinator.owner_error(stranger))
        coordinator.on_resign(index)
        return during, after, markers.written, coordinator.owner_error("t")

    during, after, written, resigned = run(scenario())
    assert during == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    assert after == (ErrorCode.NONE, ErrorCode.NOT_COORDINATOR)
    assert written == [(77, 3, False, 9, TOPIC_A)]
    assert resigned == ErrorCode.NOT_COORDINATOR
    names = [e["event"] for e in events(tmp_path)]
    assert names[:2] == ["txn-coordinator-loading", "txn-coordinator-loaded"]
    assert "txn-coordinator-unloaded" in names


def test_transitions_follow_kafkas_state_machine():
    empty = TxnMetadata("t", 1, 0, 1000)
    with pytest.raises(IllegalTransition, match="Empty -> PrepareCommit"):
        empty.prepared(True, 5)
    ongoing = empty.with_partitions(TOPIC_A, 5)
    assert ongoing.start_ms == 5 and ongoing.with_partitions(frozenset(), 9).start_ms == 5
    with pytest.raises(IllegalTransition):
        ongoing.completed(6)
    assert ongoing.prepared(False, 6).completed(7).state is TxnState.COMPLETE_ABORT


def test_transaction_log_records_round_trip_in_kafkas_schema():
    metadata = TxnMetadata("tx-é", 42, 7, 60000, TxnState.PREPARE_COMMIT,
                           frozenset({("a", 2), ("a", 0), ("b", 1)}), 11, 12)
    key, value = encode_key(metadata.transactional_id), encode_value(metadata)
    assert key == b"\x00\x00\x00\x05tx-\xc3\xa9"
    assert value[:2] == b"\x00\x00" and value[16] == TxnState.PREPARE_COMMIT
    assert decode(key, value) == ("tx-é", metadata)
    assert decode(key, None) == ("tx-é", None)


def test_skipped_fencing_is_written_only_when_the_older_epoch_changes_the_transaction(
        tmp_path):
    """A zombie's EndTxn that finds the transaction already ended (INVALID_TXN_STATE), or its
    AddPartitionsToTxn of partitions already in it, changes nothing: no `txn-fencing-skipped`
    event, so the defects checker ties no anomaly to it."""
    async def scenario():
        coordinator, _, _ = make(tmp_path, skip_fencing=True)
        _, pid, old = await coordinator.init_producer_id("t", 30000, None)
        await coordinator.add_partitions("t", pid, old, TOPIC_A)
        _, _, new = await coordinator.init_producer_id("t", 30000, None)
        already_in = await coordinator.add_partitions("t", pid, old, TOPIC_A)
        quiet = len([e for e in events(tmp_path) if e["event"] == "txn-fencing-skipped"])
        ended = await coordinator.end_txn("t", pid, new, False)
        await settle()
        late = await coordinator.end_txn("t", pid, old, True)
        await settle()
        return already_in, quiet, ended, late

    already_in, quiet, ended, late = run(scenario())
    assert (already_in, ended, late) == (ErrorCode.NONE, ErrorCode.NONE,
                                         ErrorCode.INVALID_TXN_STATE)
    skipped = [e for e in events(tmp_path) if e["event"] == "txn-fencing-skipped"]
    assert quiet == 1 and [e["cause"] for e in skipped] == ["init-producer-id"]
