"""Real transactional producers, one interface for the tests: confluent-kafka, kafka-python,
aiokafka and the Java client (kafka-clients 3.9.1, `TxnDriver.java`, a process driven
over stdin, compiled by scripts/bootstrap.sh into `.cache/java-clients/classes`).

`open_producer(client, bootstrap, transactional_id, topic)` gives a `TxnProducer`:
init, begin, send(partition, value) (the value is the key too), flush (waits for every
send since the last flush), offsets(group, topic, partition, offset) (the consumed
offset joins the transaction, `send_offsets_to_transaction`), commit, abort, close. A
failure raises `TxnError` naming the client's error.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import shutil
import subprocess
from pathlib import Path
from typing import Protocol

__all__ = ["CLIENTS", "TxnError", "TxnProducer", "open_producer", "unavailable"]

REPO = Path(__file__).resolve().parents[3]
JAVA_CLASSES = REPO / ".cache" / "java-clients" / "classes"
KAFKA_LIBS = REPO / ".cache" / "kafka" / "3.9.1" / "libs"
CLIENTS = ("confluent", "python", "asyncio", "java")
TIMEOUT = 30.0


class TxnError(Exception):
    """A transactional call failed; `name` is the client's error (code or class)."""

    def __init__(self, name: str, message: str = "") -> None:
        super().__init__(f"{name}: {message}" if message else name)
        self.name = name


class TxnProducer(Protocol):
    def init(self) -> None: ...
    def begin(self) -> None: ...
    def send(self, partition: int, value: str) -> None: ...
    def flush(self) -> None: ...
    def offsets(self, group: str, topic: str, partition: int, offset: int) -> None: ...
    def commit(self) -> None: ...
    def abort(self) -> None: ...
    def close(self) -> None: ...


def unavailable(client: str) -> str | None:
    """Why `client` cannot run here, or None."""
    if client == "java":
        if shutil.which("java") is None:
            return "java is not installed"
        if not (JAVA_CLASSES / "TxnDriver.class").exists():
            return f"{JAVA_CLASSES}/TxnDriver.class is missing: run scripts/bootstrap.sh"
    return None


def open_producer(client: str, bootstrap: str, transactional_id: str, topic: str) -> TxnProducer:
    kinds = {"confluent": ConfluentProducer, "python": KafkaPythonProducer,
             "asyncio": AioProducer, "java": JavaProducer}
    if client not in kinds:
        raise ValueError(f"unknown client {client!r}; known: {', '.join(CLIENTS)}")
    return kinds[client](bootstrap, transactional_id, topic)


class ConfluentProducer:
    def __init__(self, bootstrap: str, transactional_id: str, topic: str) -> None:
        from confluent_kafka import Producer

        self.topic = topic
        self.bootstrap = bootstrap
        self.errors: list[str] = []
        self.producer = Producer({
            "bootstrap.servers": bootstrap, "transactional.id": transactional_id,
            "acks": "all", "linger.ms": 0, "transaction.timeout.ms": 30000,
            "socket.timeout.ms": 10000, "topic.metadata.refresh.interval.ms": 1000})

    def _call(self, method, *args) -> None:
        from confluent_kafka import KafkaException

        try:
            method(*args)
        except KafkaException as exc:
            error = exc.args[0]
            raise TxnError(error.name(), error.str()) from exc

    def init(self) -> None:
        self._call(self.producer.init_transactions, TIMEOUT)

    def begin(self) -> None:
        self._call(self.producer.begin_transaction)

    def send(self, partition: int, value: str) -> None:
        def delivered(error, message) -> None:
            if error is not None:
                self.errors.append(error.name())

        self.producer.produce(self.topic, value=value, key=value, partition=partition,
                              on_delivery=delivered)

    def flush(self) -> None:
        if self.producer.flush(TIMEOUT) or self.errors:
            errors, self.errors = self.errors or ["flush timed out"], []
            raise TxnError(errors[0])

    def offsets(self, group: str, topic: str, partition: int, offset: int) -> None:
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": group})
        try:
            self._call(self.producer.send_offsets_to_transaction,
                       [TopicPartition(topic, partition, offset)],
                       consumer.consumer_group_metadata(), TIMEOUT)
        finally:
            consumer.close()

    def commit(self) -> None:
        self._call(self.producer.commit_transaction, TIMEOUT)

    def abort(self) -> None:
        self._call(self.producer.abort_transaction, TIMEOUT)

    def close(self) -> None:
        from confluent_kafka import KafkaException

        with contextlib.suppress(KafkaException):
            self.producer.flush(1)


class KafkaPythonProducer:
    def __init__(self, bootstrap: str, transactional_id: str, topic: str) -> None:
        from kafka import KafkaProducer

        self.topic = topic
        self.futures: list = []
        self.producer = KafkaProducer(bootstrap_servers=bootstrap.split(","),
                                      transactional_id=transactional_id, acks="all",
                                      request_timeout_ms=10000, max_block_ms=30000,
                                      metadata_max_age_ms=1000)

    def _call(self, method, *args):
        from kafka.errors import KafkaError

        try:
            result = method(*args)
            return result.wait(TIMEOUT) if hasattr(result, "wait") else result
        except KafkaError as exc:
            raise TxnError(type(exc).__name__, str(exc)) from exc

    def init(self) -> None:
        self._call(self.producer.init_transactions)

    def begin(self) -> None:
        self._call(self.producer.begin_transaction)

    def send(self, partition: int, value: str) -> None:
        data = value.encode()
        self.futures.append(self.producer.send(self.topic, value=data, key=data,
                                               partition=partition))

    def flush(self) -> None:
        futures, self.futures = self.futures, []
        self._call(self.producer.flush, TIMEOUT)
        for future in futures:
            self._call(future.get, TIMEOUT)

    def offsets(self, group: str, topic: str, partition: int, offset: int) -> None:
        from kafka import TopicPartition
        from kafka.structs import OffsetAndMetadata

        self._call(self.producer.send_offsets_to_transaction,
                   {TopicPartition(topic, partition): OffsetAndMetadata(offset, "", -1)}, group)

    def commit(self) -> None:
        self._call(self.producer.commit_transaction)

    def abort(self) -> None:
        self._call(self.producer.abort_transaction)

    def close(self) -> None:
        from kafka.errors import KafkaError

        with contextlib.suppress(KafkaError):
            self.producer.close(timeout=5)


class AioProducer:
    """aiokafka on its own event loop; each call runs to completion on it."""

    def __init__(self, bootstrap: str, transactional_id: str, topic: str) -> None:
        from aiokafka import AIOKafkaProducer

        self.topic = topic
        self.loop = asyncio.new_event_loop()
        self.pending: list = []
        self.producer = self.loop.run_until_complete(self._make(
            AIOKafkaProducer, bootstrap, transactional_id))

    @staticmethod
    async def _make(kind, bootstrap: str, transactional_id: str):
        return kind(bootstrap_servers=bootstrap, transactional_id=transactional_id,
                    enable_idempotence=True, acks="all", request_timeout_ms=10000,
                    metadata_max_age_ms=1000)

    def _run(self, awaitable):
        from aiokafka.errors import KafkaError

        try:
            return self.loop.run_until_complete(asyncio.wait_for(awaitable, TIMEOUT))
        except KafkaError as exc:
            raise TxnError(type(exc).__name__, str(exc)) from exc

    def init(self) -> None:
        self._run(self.producer.start())

    def begin(self) -> None:
        self._run(self.producer.begin_transaction())

    def send(self, partition: int, value: str) -> None:
        data = value.encode()
        self.pending.append(self._run(self.producer.send(self.topic, value=data, key=data,
                                                         partition=partition)))

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        self._run(self.producer.flush())
        for future in pending:
            self._run(future)

    def offsets(self, group: str, topic: str, partition: int, offset: int) -> None:
        from aiokafka.structs import TopicPartition

        self._run(self.producer.send_offsets_to_transaction(
            {TopicPartition(topic, partition): offset}, group))

    def commit(self) -> None:
        self._run(self.producer.commit_transaction())

    def abort(self) -> None:
        self._run(self.producer.abort_transaction())

    def close(self) -> None:
        from aiokafka.errors import KafkaError

        try:
            with contextlib.suppress(KafkaError, TimeoutError):
                self.loop.run_until_complete(asyncio.wait_for(self.producer.stop(), 10))
        finally:
            self.loop.close()


class JavaProducer:
    """`TxnDriver` in a process: a command line out, a JSON answer line back."""

    def __init__(self, bootstrap: str, transactional_id: str, topic: str) -> None:
        self.process = subprocess.Popen(
            ["java", "-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
             "-cp", f"{JAVA_CLASSES}:{KAFKA_LIBS}/*", "TxnDriver", bootstrap,
             transactional_id, topic],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, bufsize=1)

    def _command(self, *words: object) -> None:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(" ".join(str(word) for word in words) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        if not line:
            raise TxnError("exited", f"TxnDriver exited with {self.process.wait(10)}")
        answer = json.loads(line)
        if not answer["ok"]:
            raise TxnError(answer["error"], answer["message"])

    def init(self) -> None:
        self._command("init")

    def begin(self) -> None:
        self._command("begin")

    def send(self, partition: int, value: str) -> None:
        self._command("send", partition, value)

    def flush(self) -> None:
        self._command("flush")

    def offsets(self, group: str, topic: str, partition: int, offset: int) -> None:
        self._command("offsets", group, topic, partition, offset)

    def commit(self) -> None:
        self._command("commit")

    def abort(self) -> None:
        self._command("abort")

    def close(self) -> None:
        try:
            if self.process.poll() is None:
                self._command("close")
        except (TxnError, OSError):
            pass
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(10)
