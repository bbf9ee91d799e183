"""Real consumer-group clients as processes the tests can start and kill -9.

Every client joins group G on topic T by subscription with session.timeout.ms=6000,
heartbeat.interval.ms=1000, auto.offset.reset=earliest, metadata.max.age.ms=1000 and auto
commit off, commits synchronously after the records of each poll are written out
(at-least-once; kcat alone auto-commits, see `kcat_client`), and writes JSON lines to
stdout, one flushed line per event, each with wall time `"t"` (time.time()):

    {"event": "assigned", "partitions": [...], "t": ...}
    {"event": "revoked", "partitions": [...], "t": ...}
    {"event": "record", "partition": p, "offset": o, "value": "...", "t": ...}
    {"event": "committed", "offsets": {"p": next_offset, ...}, "t": ...}

The clients, by the names tests and benches use (none holds "kafka", so that
`pytest -k kafka` selects the Apache Kafka system alone):

- `confluent`: confluent-kafka's `Consumer` (`confluent_client`),
- `python`: kafka-python's `KafkaConsumer` (`python_client`),
- `asyncio`: aiokafka's `AIOKafkaConsumer` (`asyncio_client`),
- `kcat`: Debian's kcat behind a translating wrapper (`kcat_client`),
- `java`: kafka-clients 3.9.1, `GroupConsumer.java`, compiled by scripts/bootstrap.sh into
  `.cache/java-clients/classes`.

`start_consumer(client, bootstrap, group, topic, out_path)` starts one in its own process
group, its stdout in `out_path` and its stderr beside it; the handle kills the whole group
by its id (the kcat wrapper and kcat die together).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["ALIASES", "CLIENTS", "ConsumerHandle", "client_name", "start_consumer",
           "unavailable"]

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
JAVA_CLASSES = REPO / ".cache" / "java-clients" / "classes"
KAFKA_LIBS = REPO / ".cache" / "kafka" / "3.9.1" / "libs"
CLIENTS = ("confluent", "python", "asyncio", "kcat", "java")
ALIASES = {"confluent-kafka": "confluent", "kafka-python": "python", "aiokafka": "asyncio"}
PYTHON_MODULES = {
    "confluent": "tests.support.group_clients.confluent_client",
    "python": "tests.support.group_clients.python_client",
    "asyncio": "tests.support.group_clients.asyncio_client",
    "kcat": "tests.support.group_clients.kcat_client",
}


def client_name(name: str) -> str:
    """The client called `name` (or one of its package names); ValueError if unknown."""
    name = ALIASES.get(name, name)
    if name not in CLIENTS:
        raise ValueError(f"unknown client {name!r}; known: {', '.join(CLIENTS)}")
    return name


def unavailable(client: str) -> str | None:
    """Why `client` cannot run on this machine, or None."""
    if client == "kcat" and shutil.which("kcat") is None:
        return "kcat is not installed (apt-get install kcat, or run scripts/bootstrap.sh)"
    if client == "java":
        if shutil.which("java") is None:
            return "java is not installed"
        if not (JAVA_CLASSES / "GroupConsumer.class").exists():
            return f"{JAVA_CLASSES}/GroupConsumer.class is missing: run scripts/bootstrap.sh"
    return None


def command(client: str, bootstrap: str, group: str, topic: str) -> list[str]:
    if client == "java":
        return ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
                f"-Dlog4j.configuration=file:{HERE / 'log4j.properties'}",
                "-cp", f"{JAVA_CLASSES}:{KAFKA_LIBS}/*", "GroupConsumer",
                bootstrap, group, topic]
    return [sys.executable, "-m", PYTHON_MODULES[client], bootstrap, group, topic]


@dataclass
class ConsumerHandle:
    """One running consumer process (the leader of its own process group)."""

    client: str
    process: subprocess.Popen
    out_path: Path
    started: float = field(default_factory=time.time)

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None

    @property
    def err_path(self) -> Path:
        return self.out_path.with_suffix(".err")

    def events(self) -> list[dict]:
        """Every complete JSON line written so far."""
        try:
            text = self.out_path.read_text()
        except FileNotFoundError:
            return []
        return [json.loads(line) for line in text.split("\n")[:-1] if line.strip()]

    def assignment(self) -> set[int]:
        """The partitions of the last assignment, empty after a revocation or none yet."""
        current: set[int] = set()
        for event in self.events():
            if event["event"] == "assigned":
                current = set(event["partitions"])
            elif event["event"] == "revoked":
                current -= set(event["partitions"])
        return current

    def stderr_tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.err_path.read_text().splitlines()[-lines:])
        except FileNotFoundError:
            return ""

    def kill(self) -> None:
        """SIGKILL to the process group (kill -9), then reap."""
        self._signal_group(signal.SIGKILL)
        self.process.wait(timeout=10)

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM (the consumer closes and leaves the group); SIGKILL after `timeout`."""
        self._signal_group(signal.SIGTERM)
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            return self.process.returncode

    def _signal_group(self, sig: int) -> None:
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass


def start_consumer(client: str, bootstrap: str, group: str, topic: str,
                   out_path: Path) -> ConsumerHandle:
    """Start `client`'s consumer of `topic` in `group`; its events go to `out_path`."""
    client = client_name(client)
    reason = unavailable(client)
    if reason is not None:
        raise RuntimeError(f"client {client}: {reason}")
    out_path.parent.mkdir(parents=True, exist_ok=True)
    with open(out_path, "wb") as out, open(out_path.with_suffix(".err"), "wb") as err:
        process = subprocess.Popen(command(client, bootstrap, group, topic), cwd=REPO,
                                   stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                   start_new_session=True)
    return ConsumerHandle(client, process, out_path)
