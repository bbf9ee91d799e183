"""Produce throughput of the kchaos broker: three brokers, replication factor 3.

Starts a ZooKeeper and three `python -m broker` processes on loopback, creates a topic
with replication factor 3 (min.insync.replicas=2), then drives a batching
confluent-kafka producer with 100-byte records for `--seconds` each with acks=1 and
acks=all. Prints records/s and p50/p99 produce latency (delivery callback time minus
produce() time). Everything started is killed by PID at the end.

    .venv/bin/python bench/broker_throughput.py [--seconds 30] [--partitions 6]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from tests.support.brokers import BrokerCluster  # noqa: E402
from tests.support.zookeeper import start_zookeeper  # noqa: E402

RECORD = b"x" * 100


def percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    return sorted_values[min(len(sorted_values) - 1, int(fraction * len(sorted_values)))]


def run(bootstrap: str, topic: str, acks: str, seconds: float, linger_ms: int,
        batch_bytes: int) -> dict:
    producer = Producer({
        "bootstrap.servers": bootstrap, "acks": acks, "linger.ms": linger_ms,
        "batch.size": batch_bytes, "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576, "compression.type": "none",
        "enable.idempotence": False,
    })
    latencies: list[float] = []
    errors = [0]
    clock = time.perf_counter

    def delivered(started: float):
        def callback(error, message) -> None:
            if error is None:
                latencies.append(clock() - started)
            else:
                errors[0] += 1
        return callback

    produced = 0
    start = clock()
    deadline = start + seconds
    while True:
        now = clock()
        if now >= deadline:
            break
        callback = delivered(now)
        for _ in range(500):
            try:
                producer.produce(topic, RECORD, on_delivery=callback)
                produced += 1
            except BufferError:
                producer.poll(0.005)
        producer.poll(0)
    producer.flush(120)
    elapsed = clock() - start
    latencies.sort()
    return {"acks": acks, "records": len(latencies), "errors": errors[0], "seconds": elapsed,
            "rate": len(latencies) / elapsed, "p50_ms": percentile(latencies, 0.50) * 1000,
            "p99_ms": percentile(latencies, 0.99) * 1000}


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-check"})
    try:
        return sum(consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                   for p in range(partitions))
    finally:
        consumer.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--linger-ms", type=int, default=10)
    parser.add_argument("--batch-bytes", type=int, default=131072)
    parser.add_argument("--acks", nargs="+", default=["1", "all"])
    args = parser.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="kchaos-bench-"))
    zookeeper = start_zookeeper(directory / "zookeeper")
    try:
        cluster = BrokerCluster(zookeeper.connect, directory, size=3,
                                properties={"min.insync.replicas": "2",
                                            "replica.lag.time.max.ms": "10000"})
        with cluster:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            admin.create_topics([NewTopic("bench", args.partitions, 3)],
                                operation_timeout=30)["bench"].result()
            for partition in range(args.partitions):
                cluster.wait_for_state("bench", partition, lambda s: len(s["isr"]) == 3)
            print(f"3 brokers, RF 3, {args.partitions} partitions, 100-byte records, "
                  f"linger.ms={args.linger_ms}, batch.size={args.batch_bytes}")
            results = []
            for acks in args.acks:
                result = run(cluster.bootstrap, "bench", acks, args.seconds, args.linger_ms,
                             args.batch_bytes)
                print(f"acks={result['acks']:>3}: {result['rate']:>9,.0f} records/s "
                      f"({result['records']:,} in {result['seconds']:.1f} s, "
                      f"{result['errors']} errors), latency p50 {result['p50_ms']:.1f} ms, "
                      f"p99 {result['p99_ms']:.1f} ms", flush=True)
                results.append(result)
            delivered = sum(result["records"] for result in results)
            stored = high_watermarks(cluster.bootstrap, "bench", args.partitions)
            print(f"check: {delivered:,} records acknowledged, {stored:,} below the high "
                  f"watermarks ({'ok' if stored >= delivered else 'MISSING RECORDS'})")
    finally:
        zookeeper.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
