"""Storage append benchmark: 16 KB record batches appended to one PartitionLog for 5 s.

Usage: python bench/storage_append.py [--seconds 5] [--batch-bytes 16384] [--record-bytes 100]
Prints batches/s, records/s, MB/s and microseconds per append (as leader, CRC checked).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from kafka.record.memory_records import MemoryRecordsBuilder

from broker.storage import LogConfig, PartitionLog


def make_batch(batch_bytes: int, record_bytes: int) -> tuple[bytes, int]:
    builder = MemoryRecordsBuilder(2, 0, batch_bytes)
    value = b"x" * record_bytes
    count = 0
    while builder.size_in_bytes() + record_bytes + 20 <= batch_bytes:
        builder.append(int(time.time() * 1000), None, value)
        count += 1
    builder.close()
    return bytes(builder.buffer()), count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--batch-bytes", type=int, default=16384)
    parser.add_argument("--record-bytes", type=int, default=100)
    args = parser.parse_args()
    batch, count = make_batch(args.batch_bytes, args.record_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        log = PartitionLog.open(Path(tmp) / "bench-0", LogConfig(segment_bytes=256 << 20))
        appends = 0
        start = time.perf_counter()
        deadline = start + args.seconds
        while time.perf_counter() < deadline:
            for _ in range(100):
                log.append_as_leader(batch, 1)
            appends += 100
        elapsed = time.perf_counter() - start
        log.close()
    print(f"batch {len(batch)} bytes, {count} records of {args.record_bytes} bytes")
    print(f"{appends / elapsed:,.0f} batches/s, {appends * count / elapsed:,.0f} records/s, "
          f"{appends * len(batch) / elapsed / 1e6:,.1f} MB/s")
    print(f"{elapsed / appends * 1e6:.1f} us per append")


if __name__ == "__main__":
    main()
