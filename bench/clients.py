"""Each Kafka client at saturation through the harness, side by side, on one 3-broker
cluster per setup: our broker, and Apache Kafka 4.1.1 on KRaft.

    .venv/bin/python bench/clients.py [--dbs kchaos,kafka-kraft]
        [--clients confluent,kafka-python,java] [--seconds 20] [--threads 6]

For each setup the cluster starts once (as root, in network namespaces; safe defaults,
acks=all), then each client runs the queue workload's generator for `--seconds` with no
faults and no rate limit to speak of (`--rate 10000`, 8 keys, `--threads` workers), each
on a topic of its own, through the harness's own worker (`workloads.core.worker`), as a
`kchaos run` does. Per client it prints ok ops per second, the p50 and p99 latency of
sends and polls, and CPU seconds per 1,000 ops: of the harness's process (its worker
threads, and the client library where it runs in the process: librdkafka's threads,
kafka-python), of the client's child processes (the Java client's JVMs), and of the
brokers. Which of them is near a full core says what limits that client on this machine
(two cores shared by brokers, clients and harness).
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.broker_throughput import percentile  # noqa: E402
from bench.three_brokers import SETUPS, three_brokers  # noqa: E402
from checker.history import HistoryWriter, load_history  # noqa: E402
from harness.db.kafka.distribution import ZOOKEEPER_VERSION, fetch  # noqa: E402
from workloads.core import generator as gen  # noqa: E402
from workloads.core.worker import Interpreter  # noqa: E402
from workloads.kafka.java.build import compiled  # noqa: E402
from workloads.queue import QueueOptions, queue_workload  # noqa: E402

CLIENTS = ("confluent", "kafka-python", "java")
TICKS = os.sysconf("SC_CLK_TCK")


def process_cpu(pids: list[int]) -> float:
    """CPU seconds (user + system) the live processes `pids` used so far."""
    total = 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / TICKS
    return total


def own_cpu() -> tuple[float, float]:
    """(this process's CPU seconds, its reaped children's)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def broker_pids(cluster: Any) -> list[int]:
    return [pid for node in cluster.processes()["nodes"] for pid in node["pids"].values()]


def latencies(path: Path) -> dict[str, list[float]]:
    """Seconds from invoke to ok completion, per f."""
    invoked: dict[Any, Any] = {}
    found: dict[str, list[float]] = {}
    for op in load_history(path):
        if op.type == "invoke":
            invoked[op.process] = op
        elif op.process in invoked:
            start = invoked.pop(op.process)
            if op.type == "ok":
                found.setdefault(op.f, []).append((op.time - start.time) / 1e9)
    return found


def measure(cluster: Any, client: str, setup: str, seconds: float, threads: int,
            scratch: Path) -> dict[str, Any]:
    """One client's saturated run on `cluster`: its figures."""
    version = ZOOKEEPER_VERSION if setup == "kchaos" else SETUPS[setup][1]["kafka_version"]
    runtime = compiled(version, fetch(version).libs) if client == "java" else None
    options = QueueOptions(bootstrap_servers=tuple(cluster.bootstrap_servers.split(",")),
                           client=client, topic=f"bench-{client}", keys=8,
                           concurrency=threads, rate=10_000, seed=1, java_runtime=runtime)
    workload = queue_workload(options)
    path = scratch / f"{setup}-{client}.jsonl"
    brokers = broker_pids(cluster)
    with HistoryWriter(path) as history:
        interpreter = Interpreter({}, workload.client, history, concurrency=threads,
                                  nodes=list(options.bootstrap_servers),
                                  op_timeout=options.op_timeout)
        interpreter.setup_clients()
        harness_before, children_before = own_cpu()
        brokers_before = process_cpu(brokers)
        started = time.monotonic()
        worker = threading.Thread(target=interpreter.run,
                                  args=(gen.time_limit(seconds, gen.clients(workload.generator)),),
                                  kwargs={"time_limit": seconds + 30})
        worker.start()
        worker.join()
        wall = time.monotonic() - started
        brokers_cpu = process_cpu(brokers) - brokers_before
        workload.client.teardown({})
        harness_after, children_after = own_cpu()
    ops = {f: sorted(values) for f, values in latencies(path).items()}
    ok = sum(len(values) for values in ops.values())
    per_thousand = 1000 / ok if ok else float("nan")
    return {
        "client": client, "ok_per_s": ok / wall,
        "send_p50_ms": 1000 * percentile(ops.get("send", []), 0.5),
        "send_p99_ms": 1000 * percentile(ops.get("send", []), 0.99),
        "poll_p50_ms": 1000 * percentile(ops.get("poll", []), 0.5),
        "poll_p99_ms": 1000 * percentile(ops.get("poll", []), 0.99),
        "harness_cpu": (harness_after - harness_before) * per_thousand,
        "children_cpu": (children_after - children_before) * per_thousand,
        "brokers_cpu": brokers_cpu * per_thousand,
        "harness_share": (harness_after - harness_before) / wall,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dbs", default="kchaos,kafka-kraft")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--threads", type=int, default=6)
    args = parser.parse_args()
    print(f"{args.seconds:g} s per client, {args.threads} threads, acks=all, 8 keys, no faults; "
          "CPU in seconds per 1,000 ok ops (harness process / client child processes / "
          "brokers); harness share = its CPU over wall time (1.0 = one core)")
    print(f"{'setup':<12} {'client':<13} {'ok ops/s':>9} {'send p50':>9} {'send p99':>9} "
          f"{'poll p50':>9} {'poll p99':>9} {'harness':>8} {'children':>9} {'brokers':>8} "
          f"{'share':>6}")
    with tempfile.TemporaryDirectory(prefix="kchaos-bench-clients-") as scratch:
        for setup in args.dbs.split(","):
            with three_brokers(setup).start() as cluster:
                for client in args.clients.split(","):
                    row = measure(cluster, client, setup, args.seconds, args.threads,
                                  Path(scratch))
                    print(f"{setup:<12} {client:<13} {row['ok_per_s']:9.0f} "
                          f"{row['send_p50_ms']:7.1f}ms {row['send_p99_ms']:7.1f}ms "
                          f"{row['poll_p50_ms']:7.1f}ms {row['poll_p99_ms']:7.1f}ms "
                          f"{row['harness_cpu']:8.2f} {row['children_cpu']:9.2f} "
                          f"{row['brokers_cpu']:8.2f} {row['harness_share']:6.2f}",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
