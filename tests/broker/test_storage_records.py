"""Batch header parsing and validation: real kafka-python batches and bad input."""

from __future__ import annotations

import struct

import pytest
from crc32c import crc32c
from hypothesis import given, settings
from hypothesis import strategies as st

import broker.storage as storage
from broker.storage import (
    BatchHeader,
    CorruptRecordError,
    InvalidRecordError,
    StorageError,
    iter_batch_headers,
)
from broker.storage.records import HEADER_SIZE
from tests.support.batches import GZIP, make_batch, values_of


def test_exported_names_are_the_public_api():
    assert sorted(storage.__all__) == sorted(
        name for name in dir(storage) if not name.startswith("_")
        and name not in {"errors", "records", "index", "segment", "epoch_cache",
                         "checkpoints", "log", "manager", "cleaner", "markers",
                         "producer_state", "producer_snapshot", "producer_replay",
                         "txn_index", "power_loss", "swaps"})


def test_headers_of_real_batches_match_kafka_python():
    first = make_batch(values_of(5), producer=(42, 3, 100))
    second = make_batch(values_of(3, size=300), compression=GZIP)
    headers = list(iter_batch_headers(first + second, verify_crc=True))
    assert [h.position for h in headers] == [0, len(first)]
    assert [h.size for h in headers] == [len(first), len(second)]
    one, two = headers
    assert isinstance(one, BatchHeader)
    assert (one.magic, one.record_count, one.last_offset_delta) == (2, 5, 4)
    assert (one.producer_id, one.producer_epoch, one.base_sequence) == (42, 3, 100)
    assert one.last_sequence == 104
    assert one.crc == crc32c(first[21:])
    assert two.compression_type == GZIP and two.record_count == 3
    assert two.size < 3 * 300, "the gzip batch really is compressed"
    assert not one.is_transactional and not one.is_control and not one.has_log_append_time


def test_last_sequence_wraps_like_kafka():
    header = next(iter_batch_headers(make_batch(values_of(3), producer=(1, 0, 2**31 - 2))))
    assert header.last_sequence == 0


def test_empty_input_has_no_headers():
    assert list(iter_batch_headers(b"")) == []


def test_truncated_header_is_corrupt():
    batch = make_batch(values_of(2))
    with pytest.raises(CorruptRecordError, match="truncated batch header"):
        list(iter_batch_headers(batch[:40]))


def test_truncated_body_is_corrupt():
    batch = make_batch(values_of(2))
    with pytest.raises(CorruptRecordError, match="truncated batch"):
        list(iter_batch_headers(batch + batch[:-1]))


def test_bad_crc_is_corrupt_only_when_verified():
    batch = bytearray(make_batch(values_of(4)))
    batch[-3] ^= 0xFF
    assert len(list(iter_batch_headers(batch))) == 1
    with pytest.raises(CorruptRecordError, match="CRC-32C mismatch"):
        list(iter_batch_headers(batch, verify_crc=True))


def test_wrong_magic_is_invalid():
    batch = bytearray(make_batch(values_of(2)))
    batch[16] = 1
    with pytest.raises(InvalidRecordError, match="v1"):
        list(iter_batch_headers(batch))


def test_legacy_v0_message_set_is_invalid():
    from kafka.record.memory_records import MemoryRecordsBuilder

    builder = MemoryRecordsBuilder(0, 0, 1 << 16)
    builder.append(None, None, b"old")
    builder.close()
    with pytest.raises(InvalidRecordError, match="message format v0"):
        list(iter_batch_headers(bytes(builder.buffer())))


def test_garbage_is_corrupt():
    with pytest.raises(CorruptRecordError):
        list(iter_batch_headers(b"\x07" * 200))


def test_batch_length_below_header_is_corrupt():
    batch = bytearray(make_batch(values_of(1)))
    struct.pack_into(">i", batch, 8, 10)
    with pytest.raises(CorruptRecordError, match="below the minimum"):
        list(iter_batch_headers(batch))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_arbitrary_bytes_either_parse_or_raise_storage_errors(data):
    try:
        headers = list(iter_batch_headers(data, verify_crc=True))
    except StorageError:
        return
    assert sum(h.size for h in headers) == len(data)
    assert all(h.size >= HEADER_SIZE for h in headers)


@settings(max_examples=200, deadline=None)
@given(st.data())
def test_any_single_byte_flip_in_the_crc_range_is_detected(data):
    batch = bytearray(make_batch(values_of(6)))
    pos = data.draw(st.integers(min_value=21, max_value=len(batch) - 1))
    batch[pos] ^= data.draw(st.integers(min_value=1, max_value=255))
    with pytest.raises(StorageError):
        list(iter_batch_headers(batch, verify_crc=True))
