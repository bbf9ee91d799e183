"""Model-based test: random appends, rolls, truncations, retention, flushes, clean and unclean
reopens (with torn tails) against an in-memory list of batches and Kafka's epoch-cache rules."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from broker.storage import LogConfig, PartitionLog
from tests.support.batches import GZIP, decode, decode_batches, make_batch


@dataclass(frozen=True)
class Batch:
    base: int
    epoch: int
    values: tuple[bytes, ...]

    @property
    def last(self) -> int:
        return self.base + len(self.values) - 1


class LogModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.tmp = Path(tempfile.mkdtemp(prefix="storage-model-"))
        self.batches: list[Batch] = []
        self.empty_at = 0  # where the log starts and ends while it holds no batch
        self.epochs: list[tuple[int, int]] = []  # (epoch, start offset), Kafka's rules
        self.epoch = 0
        self.counter = 0

    @initialize(segment_bytes=st.sampled_from([120, 400, 1 << 20]),
                index_interval=st.sampled_from([0, 100, 4096]),
                retention_bytes=st.sampled_from([-1, 0, 500]))
    def open_log(self, segment_bytes: int, index_interval: int, retention_bytes: int) -> None:
        self.config = LogConfig(segment_bytes=segment_bytes, index_interval_bytes=index_interval,
                                retention_bytes=retention_bytes, retention_ms=-1)
        self.log = PartitionLog.open(self.tmp / "model-0", self.config)

    @property
    def start(self) -> int:
        return self.batches[0].base if self.batches else self.empty_at

    @property
    def end(self) -> int:
        return self.batches[-1].last + 1 if self.batches else self.empty_at

    @rule(count=st.integers(1, 6), bump=st.booleans(), compressed=st.booleans())
    def append(self, count: int, bump: bool, compressed: bool) -> None:
        self.epoch += bump
        values = tuple(b"value-%d" % (self.counter + i) * 3 for i in range(count))
        self.counter += count
        info = self.log.append_as_leader(make_batch(list(values), GZIP if compressed else 0),
                                         self.epoch)
        assert info.first_offset == self.end
        if not self.epochs or self.epoch > self.epochs[-1][0]:
            self._drop_epochs_from(self.end)  # an epoch that saw no batch is replaced
            self.epochs.append((self.epoch, self.end))
        self.batches.append(Batch(self.end, self.epoch, values))

    def _drop_epochs_from(self, end: int) -> None:
        self.epochs = [(e, s) for e, s in self.epochs if s < end]

    @rule()
    def roll(self) -> None:
        self.log.roll()

    @rule()
    def flush(self) -> None:
        self.log.flush()
        assert self.log.recovery_point == self.end

    @rule(data=st.data())
    def truncate(self, data) -> None:
        offset = data.draw(st.integers(max(0, self.start - 2), self.end + 2))
        self.log.truncate_to(offset)
        if offset >= self.end:
            return
        if offset <= self.start:
            self.batches, self.empty_at, self.epochs = [], offset, []
            return
        removed = [b for b in self.batches if b.last >= offset]
        self.batches = [b for b in self.batches if b.last < offset]
        if not self.batches:
            self.empty_at = removed[0].base
        self._drop_epochs_from(self.end)

    @rule(data=st.data())
    def retention(self, data) -> None:
        high_watermark = data.draw(st.integers(self.start, self.end))
        end = self.end
        self.log.delete_old_segments(high_watermark=high_watermark)
        start = self.log.log_start_offset
        assert start in {b.base for b in self.batches} | {self.start, end}
        assert start <= max(high_watermark, self.start)
        self.batches = [b for b in self.batches if b.base >= start]
        if not self.batches:
            self.empty_at = end
        older = [(e, s) for e, s in self.epochs if s <= start]
        if older:  # the epoch covering the new start is kept, starting there
            self.epochs = [(older[-1][0], start)] + [(e, s) for e, s in self.epochs if s > start]

    @rule(clean=st.booleans(), data=st.data())
    def reopen(self, clean: bool, data) -> None:
        if clean:
            self.log.close()
            point = self.log.recovery_point
        else:
            for segment in self.log.segments:
                segment.close()
            point = data.draw(st.integers(0, self.log.recovery_point))
        self.log = PartitionLog.open(self.log.directory, self.config, recovery_point=point)
        self._drop_epochs_from(self.end)  # as Kafka, loading forgets epochs starting at the end

    @precondition(lambda self: self.batches)
    @rule(data=st.data())
    def crash_with_torn_tail(self, data) -> None:
        last_size = len(self.log.read(self.batches[-1].base, 1))
        for segment in self.log.segments:
            segment.close()
        last_file = max(self.log.directory.glob("*.log"))
        size = last_file.stat().st_size
        if size == 0:  # the batch is in the previous segment: tear that one
            last_file = sorted(self.log.directory.glob("*.log"))[-2]
            size = last_file.stat().st_size
        os.truncate(last_file, size - data.draw(st.integers(1, last_size)))
        torn = self.batches.pop()
        if not self.batches:
            self.empty_at = torn.base
        self._drop_epochs_from(self.end)
        point = min(self.log.recovery_point, self.end)
        self.log = PartitionLog.open(self.log.directory, self.config, recovery_point=point)

    @invariant()
    def matches_the_model(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.log_end_offset == self.end
        assert self.log.log_start_offset == self.start
        data = self.log.read(self.start, 1 << 24)
        expected = [(b.base + i, v) for b in self.batches for i, v in enumerate(b.values)]
        assert decode(data) == expected
        assert decode_batches(data) == [(b.base, b.last, b.epoch) for b in self.batches]

    @invariant()
    def epochs_match_the_model(self) -> None:
        if not hasattr(self, "log"):
            return
        assert self.log.epoch_cache.entries() == self.epochs
        for i, (epoch, _) in enumerate(self.epochs):
            end = self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.end
            assert self.log.end_offset_for_epoch(epoch) == (epoch, end)
        for b in self.batches:
            assert self.log.end_offset_for_epoch(b.epoch)[0] == b.epoch
        if self.epochs:
            assert self.log.end_offset_for_epoch(self.epochs[-1][0] + 1) == (-1, -1)

    @invariant()
    def every_offset_reads_its_batch(self) -> None:
        if not hasattr(self, "log"):
            return
        for b in self.batches:
            for offset in (b.base, b.last):
                assert decode_batches(self.log.read(offset, 1)) == [(b.base, b.last, b.epoch)]

    def teardown(self) -> None:
        if hasattr(self, "log"):
            self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


LogModel.TestCase.settings = settings(max_examples=80, stateful_step_count=30, deadline=None)
test_partition_log_against_model = LogModel.TestCase
