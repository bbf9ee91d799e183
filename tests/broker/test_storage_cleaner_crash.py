"""SIGKILL during log compaction: a separate process cleans, dies at a chosen step of the
swap (or at a random moment), and the reopened log has lost nothing."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from kafka.record import MemoryRecords
from kafka.record.memory_records import MemoryRecordsBuilder

from broker.storage import LogConfig, PartitionLog
from tests.support.batches import GZIP

CONFIG = LogConfig(segment_bytes=4096, index_interval_bytes=256)
GROUP_BYTES = 3 * 4096
ROOT = Path(__file__).parent.parent.parent

CLEANER = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from broker.storage import CleanerConfig, LogConfig, PartitionLog
    from broker.storage.cleaner import clean_log

    directory, step, nth, recovery_point = sys.argv[1], sys.argv[2], int(sys.argv[3]), \\
        int(sys.argv[4])
    seen = 0

    def die_at(name):
        global seen
        if name == step:
            seen += 1
            if seen == nth:
                os.kill(os.getpid(), signal.SIGKILL)

    log = PartitionLog.open(Path(directory), LogConfig(segment_bytes=4096,
                                                       index_interval_bytes=256),
                            recovery_point)
    print("ready", flush=True)
    result = clean_log(log, None, CleanerConfig(min_cleanable_ratio=0.0,
                                                max_segment_bytes=3 * 4096), None, die_at)
    assert result is not None
    print("done", flush=True)
""")

Record = tuple[int, bytes | None, bytes | None]


def content(log: PartitionLog) -> list[Record]:
    records = MemoryRecords(log.read(log.log_start_offset, 1 << 28))
    out = []
    while records.has_next():
        batch = records.next_batch()
        assert batch.validate_crc()
        out.extend((r.offset, r.key, r.value) for r in batch)
    return out


def batch_of(items: list[tuple[bytes | None, bytes | None]], compression: int) -> bytes:
    """Timestamped now, so that no tombstone is past delete.retention.ms."""
    builder = MemoryRecordsBuilder(2, compression, 1 << 24)
    for key, value in items:
        builder.append(int(time.time() * 1000), key, value)
    builder.close()
    return bytes(builder.buffer())


@pytest.fixture(scope="module")
def template(tmp_path_factory) -> tuple[Path, list[Record], int]:
    """A log of many segments: 60 keys overwritten again and again, some tombstones, some
    keyless records, every fourth batch gzipped. Returns (dir, its records, log end)."""
    directory = tmp_path_factory.mktemp("template") / "compacted-0"
    log = PartitionLog.open(directory, CONFIG)
    rng = random.Random(14)
    for n in range(300):
        items = []
        for _ in range(rng.randint(1, 6)):
            key = None if rng.random() < 0.05 else b"key-%02d" % rng.randrange(60)
            value = None if key and rng.random() < 0.05 else b"value-%d-" % n + b"." * 40
            items.append((key, value))
        log.append_as_leader(batch_of(items, GZIP if n % 4 == 0 else 0), 1)
    records, end = content(log), log.log_end_offset
    assert len(log.segments) > 10
    log.close()
    return directory, records, end


def latest_per_key(records: list[Record]) -> dict[bytes, Record]:
    return {key: (offset, key, value) for offset, key, value in records if key is not None}


def assert_nothing_lost(directory: Path, original: list[Record], end: int) -> None:
    for recovery_point in (end, 0):
        log = PartitionLog.open(directory, CONFIG, recovery_point)
        records = content(log)
        assert log.log_end_offset == end
        assert set(records) <= set(original), "no record moved or changed"
        assert [o for o, _, _ in records] == sorted({o for o, _, _ in records})
        kept = set(records)
        assert all(latest in kept for latest in latest_per_key(original).values())
        assert all(r in kept for r in original if r[1] is None), "keyless records stay"
        assert not [p for p in directory.iterdir() if p.suffix in (".cleaned", ".swap")]
        log.close()


def run_cleaner(directory: Path, end: int, step: str = "-", nth: int = 0
                ) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", CLEANER, str(directory), step, str(nth),
                             str(end)], stdout=subprocess.PIPE, cwd=ROOT)


@pytest.mark.parametrize("step,nth", [("cleaned", 1), ("swap", 1), ("deleted", 1),
                                      ("deleted", 2), ("replaced", 1), ("swap", 3),
                                      ("replaced", 4)])
def test_sigkill_at_each_step_of_the_swap_loses_nothing(tmp_path, template, step, nth):
    source, original, end = template
    directory = tmp_path / "compacted-0"
    shutil.copytree(source, directory)
    proc = run_cleaner(directory, end, step, nth)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL and b"done" not in out
    assert_nothing_lost(directory, original, end)
    finished = run_cleaner(directory, end)
    assert finished.communicate(timeout=60)[0].endswith(b"done\n"), "a later round completes"
    assert_nothing_lost(directory, original, end)


def test_sigkill_at_random_moments_loses_nothing(tmp_path, template):
    """A round takes tens of milliseconds here: the kills land before, during and after."""
    source, original, end = template
    rng = random.Random(1414)
    for attempt in range(10):
        directory = tmp_path / f"attempt-{attempt}" / "compacted-0"
        shutil.copytree(source, directory)
        proc = run_cleaner(directory, end)
        try:
            assert proc.stdout.readline() == b"ready\n"
            time.sleep(rng.uniform(0.0, 0.04))
        finally:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            proc.stdout.close()
        assert_nothing_lost(directory, original, end)
