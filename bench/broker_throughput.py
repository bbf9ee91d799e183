"""Produce throughput of our broker and of Apache Kafka, side by side: three brokers, RF 3.

For each `--db` setup (default all three: kchaos, kafka on ZooKeeper, kafka-kraft: Kafka
4.1.1 on KRaft; see `three_brokers.py`) brings up three brokers in
network namespaces (`kchaos cluster up`'s code, as root), creates a topic with
replication factor 3 (min.insync.replicas=2), then drives a batching confluent-kafka
producer with 100-byte records, first `--warmup` seconds unmeasured (Kafka's JIT), then
for `--seconds` each with acks=1 and acks=all. Prints
records/s and p50/p99 produce latency (delivery callback time minus produce() time) per
db, then the ratio ours/Kafka. Each cluster is taken down (processes killed, namespaces
removed) before the next starts.

    .venv/bin/python bench/broker_throughput.py [--db kchaos,kafka,kafka-kraft] [--seconds 30]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from three_brokers import SETUPS, create_topic, db_names, three_brokers  # noqa: E402

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


def measure(db_name: str, args: argparse.Namespace) -> list[dict]:
    with three_brokers(db_name).start(timeout=180) as cluster:
        create_topic(cluster, "bench", args.partitions)
        if args.warmup > 0:  # the JVM compiles its hot paths first; ours has none to compile
            run(cluster.bootstrap_servers, "bench", "all", args.warmup, args.linger_ms,
                args.batch_bytes)
        results = []
        for acks in args.acks:
            result = run(cluster.bootstrap_servers, "bench", acks, args.seconds,
                         args.linger_ms, args.batch_bytes)
            print(f"{db_name:>11} acks={result['acks']:>3}: {result['rate']:>9,.0f} records/s "
                  f"({result['records']:,} in {result['seconds']:.1f} s, "
                  f"{result['errors']} errors), latency p50 {result['p50_ms']:.1f} ms, "
                  f"p99 {result['p99_ms']:.1f} ms", flush=True)
            results.append(result)
        delivered = sum(result["records"] for result in results)
        stored = high_watermarks(cluster.bootstrap_servers, "bench", args.partitions)
        print(f"{db_name:>11} check: {delivered:,} records acknowledged, {stored:,} below the "
              f"high watermarks ({'ok' if stored >= delivered else 'MISSING RECORDS'})",
              flush=True)
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default=",".join(SETUPS), help="comma-separated setups")
    parser.add_argument("--seconds", type=float, default=30.0)
    parser.add_argument("--partitions", type=int, default=6)
    parser.add_argument("--warmup", type=float, default=10.0,
                        help="seconds of unmeasured acks=all writes first (default 10)")
    parser.add_argument("--linger-ms", type=int, default=10)
    parser.add_argument("--batch-bytes", type=int, default=131072)
    parser.add_argument("--acks", nargs="+", default=["1", "all"])
    args = parser.parse_args()
    names = db_names(parser, args.db)
    print(f"3 brokers in network namespaces, RF 3, {args.partitions} "
          f"partitions, 100-byte records, linger.ms={args.linger_ms}, "
          f"batch.size={args.batch_bytes}")
    figures = {name: measure(name, args) for name in names}
    for peer in ("kafka", "kafka-kraft"):
        if "kchaos" not in figures or peer not in figures:
            continue
        for ours, theirs in zip(figures["kchaos"], figures[peer], strict=True):
            print(f"acks={ours['acks']:>3}: ours/{peer} {ours['rate'] / theirs['rate']:.2f} "
                  f"of the records/s, p50 {ours['p50_ms']:.1f} vs {theirs['p50_ms']:.1f} ms, "
                  f"p99 {ours['p99_ms']:.1f} vs {theirs['p99_ms']:.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
