"""Crash recovery: torn tails, flipped bytes, lost indexes, lost epoch checkpoints, SIGKILL."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from broker.storage import LogConfig, PartitionLog
from tests.support.batches import decode, decode_batches, make_batch, values_of

CONFIG = LogConfig(segment_bytes=1200, index_interval_bytes=150)


def write(log: PartitionLog, batches: int, epoch: int) -> list[bytes]:
    """Append `batches` batches of 1 to 4 records; returns their values in order."""
    values = []
    for _ in range(batches):
        vs = values_of(1 + log.log_end_offset % 4, tag=f"o{log.log_end_offset}-", size=10)
        log.append_as_leader(make_batch(vs), epoch)
        values.extend(vs)
    return values


def crash(log: PartitionLog) -> None:
    """Drop the log without flushing or closing cleanly (file descriptors only)."""
    for segment in log.segments:
        segment.close()


def segment_files(log: PartitionLog) -> list[Path]:
    return sorted(log.directory.glob("*.log"))


def batch_positions(path: Path) -> list[tuple[int, int, int]]:
    """(position, size, base offset) of the batches in a segment file."""
    data = path.read_bytes()
    out, pos = [], 0
    for base, last, _ in decode_batches(data):
        size = 12 + int.from_bytes(data[pos + 8:pos + 12], "big")
        out.append((pos, size, base))
        pos += size
        assert last >= base
    return out


def assert_prefix_and_appendable(log: PartitionLog, values: list[bytes], keep: int) -> None:
    assert log.log_end_offset == keep
    assert [v for _, v in decode(log.read(0, 1 << 24))] == values[:keep]
    assert [o for o, _ in decode(log.read(0, 1 << 24))] == list(range(keep))
    info = log.append_as_leader(make_batch([b"after"]), 9)
    assert info.first_offset == keep
    assert decode(log.read(keep, 100)) == [(keep, b"after")]


@pytest.mark.parametrize("seed", range(8))
def test_torn_tail_inside_the_last_batch_is_cut(tmp_path, seed):
    rng = random.Random(seed)
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    values = write(log, 12, epoch=1)
    values += write(log, 3, epoch=2)
    crash(log)
    last_file = segment_files(log)[-1]
    pos, size, base = batch_positions(last_file)[-1]
    cut = pos + rng.randrange(1, size)
    os.truncate(last_file, cut)
    again = PartitionLog.open(log.directory, CONFIG, recovery_point=0)
    assert last_file.stat().st_size == pos
    assert again.epoch_cache.latest_epoch in (1, 2)
    assert_prefix_and_appendable(again, values, base)


@pytest.mark.parametrize("seed", range(8))
def test_flipped_byte_after_the_recovery_point_cuts_from_that_batch(tmp_path, seed):
    rng = random.Random(seed)
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    values = write(log, 10, epoch=1)
    log.flush()
    recovery_point = log.recovery_point
    values += write(log, 20, epoch=3)
    crash(log)
    victims = [(path, pos, size, base) for path in segment_files(log)
               for pos, size, base in batch_positions(path) if base >= recovery_point]
    path, pos, size, base = rng.choice(victims)
    data = bytearray(path.read_bytes())
    data[pos + rng.randrange(21, size)] ^= 1 << rng.randrange(8)
    path.write_bytes(bytes(data))
    again = PartitionLog.open(log.directory, CONFIG, recovery_point=recovery_point)
    assert path.stat().st_size == pos
    assert all(p <= path for p in segment_files(again)), "later segments are deleted"
    expected_epochs = [(1, 0)] + ([(3, recovery_point)] if base > recovery_point else [])
    assert again.epoch_cache.entries() == expected_epochs
    assert again.recovery_point == base
    assert_prefix_and_appendable(again, values, base)


def test_corruption_before_the_recovery_point_is_trusted_like_kafka(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    write(log, 30, epoch=1)
    log.flush()
    crash(log)
    assert len(segment_files(log)) > 1
    path = segment_files(log)[0]
    data = bytearray(path.read_bytes())
    data[-2] ^= 0xFF
    path.write_bytes(bytes(data))
    again = PartitionLog.open(log.directory, CONFIG, recovery_point=log.recovery_point)
    assert again.log_end_offset == log.log_end_offset
    again.close()
    rechecked = PartitionLog.open(log.directory, CONFIG, recovery_point=0)
    assert rechecked.log_end_offset < again.segments[1].base_offset


@pytest.mark.parametrize("recovery_point", [0, None])
def test_deleted_index_is_rebuilt_identically(tmp_path, recovery_point):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    values = write(log, 30, epoch=1)
    log.flush()
    indexes = {p: p.read_bytes() for p in log.directory.glob("*.index")}
    assert len(indexes) > 2 and all(indexes.values())
    crash(log)
    for path in indexes:
        path.unlink()
    point = log.recovery_point if recovery_point is None else recovery_point
    again = PartitionLog.open(log.directory, CONFIG, recovery_point=point)
    assert {p: p.read_bytes() for p in again.directory.glob("*.index")} == indexes
    assert all(s.recovered for s in again.segments)
    for offset in range(again.log_end_offset):
        assert decode(again.read(offset, 1))[0][0] <= offset
    assert_prefix_and_appendable(again, values, len(values))


def test_garbage_index_is_rebuilt(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    values = write(log, 30, epoch=1)
    log.flush()
    crash(log)
    first_index = sorted(log.directory.glob("*.index"))[0]
    good = first_index.read_bytes()
    first_index.write_bytes(b"\xff" * 16)
    again = PartitionLog.open(log.directory, CONFIG, recovery_point=log.recovery_point)
    assert first_index.read_bytes() == good
    assert_prefix_and_appendable(again, values, len(values))


def test_lost_epoch_checkpoint_is_rebuilt_from_the_batches(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    write(log, 8, epoch=1)
    write(log, 8, epoch=4)
    write(log, 8, epoch=6)
    entries = log.epoch_cache.entries()
    log.close()
    (log.directory / "leader-epoch-checkpoint").unlink()
    again = PartitionLog.open(log.directory, CONFIG, recovery_point=log.recovery_point)
    assert again.epoch_cache.entries() == entries
    (log.directory / "leader-epoch-checkpoint").write_text("0\n7\nnonsense\n")
    again.close()
    third = PartitionLog.open(log.directory, CONFIG, recovery_point=log.recovery_point)
    assert third.epoch_cache.entries() == entries


def test_epoch_entries_beyond_the_recovered_end_are_dropped(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    write(log, 3, epoch=1)
    end = log.log_end_offset
    write(log, 2, epoch=2)
    crash(log)
    last = segment_files(log)[-1]
    os.truncate(last, [p for p, _, b in batch_positions(last) if b == end][0])
    again = PartitionLog.open(log.directory, CONFIG)
    assert again.epoch_cache.entries() == [(1, 0)]
    assert (again.directory / "leader-epoch-checkpoint").read_text() == "0\n1\n1 0\n"


def test_stray_files_are_removed_on_open(tmp_path):
    log = PartitionLog.open(tmp_path / "t-0", CONFIG)
    write(log, 2, epoch=0)
    log.close()
    for name in ("00000000000000000000.log.deleted", "leader-epoch-checkpoint.tmp",
                 "00000000000000000099.index", "00000000000000000099.txnindex",
                 "00000000000000000007.snapshot.tmp"):
        (log.directory / name).write_bytes(b"x")
    PartitionLog.open(log.directory, CONFIG, recovery_point=log.recovery_point)
    assert sorted(p.name for p in log.directory.iterdir()) == [
        "00000000000000000000.index", "00000000000000000000.log",
        "00000000000000000003.snapshot", "leader-epoch-checkpoint"]


WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from broker.storage import LogConfig, PartitionLog
    from tests.support.batches import make_batch
    log = PartitionLog.open(Path(sys.argv[1]), LogConfig(segment_bytes=64 * 1024,
                                                         index_interval_bytes=512))
    n = 0
    while True:
        info = log.append_as_leader(make_batch([b"%08d" % (n + i) for i in range(5)]), 1)
        n += 5
        print(info.last_offset, flush=True)
""")


def test_sigkill_during_appends_keeps_every_acknowledged_record(tmp_path):
    directory = tmp_path / "killed-0"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(directory)],
                            stdout=subprocess.PIPE, cwd=Path(__file__).parent.parent.parent)
    try:
        acknowledged = -1
        deadline = time.monotonic() + 30
        while acknowledged < 3000 and time.monotonic() < deadline:
            acknowledged = int(proc.stdout.readline())
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    assert acknowledged >= 3000
    log = PartitionLog.open(directory, LogConfig(segment_bytes=64 * 1024,
                                                 index_interval_bytes=512))
    assert len(log.segments) > 1
    assert log.log_end_offset > acknowledged
    records = decode(log.read(0, 1 << 26))
    assert records == [(i, b"%08d" % i) for i in range(log.log_end_offset)]
    assert log.append_as_leader(make_batch([b"next"]), 2).first_offset == log.log_end_offset - 1
