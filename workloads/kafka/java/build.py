"""The Java client's classes: `KchaosClient.java` compiled against one Kafka version's jars.

`compiled(version, libs)` returns the `JavaRuntime` of that version, compiling the source
into `.cache/java-clients/<version>-<stamp>/` (a sha256 of the source and the jars'
folder) only when that folder is not complete yet, so a second call costs nothing. The classes go
into a jar, and a short training run of each mode (against no broker) dumps the classes
it loaded into a class-data-sharing archive (AppCDS) that every later start maps instead
of loading and verifying them again: it halves a start's CPU, which counts when a run
starts a dozen JVMs at once on two cores. The bootstrap
compiles the versions it caches (`python -m workloads.kafka.java.build VERSION LIBS ...`);
the harness compiles any other version a run asks for, once.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["CACHE", "JavaClientUnavailable", "JavaRuntime", "SOURCE", "compiled"]

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "KchaosClient.java"
LOG_CONFIG = HERE / "log4j.properties"
CACHE = HERE.parents[2] / ".cache" / "java-clients"
MAIN_CLASS = "KchaosClient"
JAR = "kchaos-client.jar"
MODES = ("queue", "member", "transfer")
STAMP = ".stamp"
# What a training run asks of each mode, against an address where no broker listens.
TRAINING: dict[str, list[dict[str, Any]]] = {
    "queue": [{"bootstrap_servers": ["127.0.0.1:1"], "topic": "t", "topics": {"t": 1},
               "replication_factor": 1, "acks": "all", "retries": 0, "idempotence": False,
               "linger_ms": 0, "op_timeout_ms": 500, "max_poll_records": 10,
               "isolation_level": "read_committed"},
              {"id": 1, "op": "assign", "partitions": [[0, None]]},
              {"id": 2, "op": "poll", "timeout_ms": 100},
              {"id": 3, "op": "close"}],
    "member": [{"bootstrap_servers": ["127.0.0.1:1"], "topic": "t", "group": "g",
                "partition_keys": [[0, 0]], "commit": "after-process",
                "session_timeout_ms": 6000, "poll_timeout": 0.1, "max_poll_records": 10,
                "op_timeout": 0.5, "group_protocol": "classic"},
               {"id": 1, "op": "subscribe"}, {"id": 2, "op": "poll"}, {"id": 3, "op": "close"}],
    "transfer": [{"member": {"bootstrap_servers": ["127.0.0.1:1"], "topic": "t", "group": "g",
                             "partition_keys": [[0, 0]], "commit": "in-transaction",
                             "session_timeout_ms": 6000, "poll_timeout": 0.1,
                             "max_poll_records": 10, "op_timeout": 0.5,
                             "group_protocol": "classic"},
                  "producer": {"transactional_id": "t", "transaction_timeout_ms": 10000,
                               "linger_ms": 0},
                  "output_topic": "o", "outputs": [[0, 1, 0]]},
                 {"id": 1, "op": "transfer", "abort": False, "attempt": 0},
                 {"id": 2, "op": "subscribe"}, {"id": 3, "op": "close"}],
}
# Small, quick JVMs: a run starts one or two per client process on shared cores.
JVM_OPTIONS = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xshare:auto")


class JavaClientUnavailable(RuntimeError):
    """The Java client cannot be compiled: the message says why and what to do."""


@dataclass(frozen=True)
class JavaRuntime:
    """The compiled Java client of one Kafka version: how to start it."""

    version: str
    libs: Path
    classes: Path
    java: str = "java"

    def command(self, mode: str) -> list[str]:
        """The child's command line: `mode` is "queue", "member" or "transfer"."""
        archive = self.classes / f"{mode}.jsa"
        sharing = [f"-XX:SharedArchiveFile={archive}"] if archive.exists() else []
        return [self.java, *JVM_OPTIONS, *sharing, *self._classpath(), MAIN_CLASS, mode]

    def _classpath(self) -> list[str]:
        return [f"-Dlog4j.configuration=file:{LOG_CONFIG}",
                "-cp", f"{self.classes / JAR}:{self.libs}/*"]

    def train(self, mode: str) -> None:
        """Dump the archive of `mode`'s classes (a best effort: without it, a start only
        takes longer)."""
        lines = "".join(json.dumps(line) + "\n" for line in TRAINING[mode])
        try:
            subprocess.run([self.java, *JVM_OPTIONS,
                            f"-XX:ArchiveClassesAtExit={self.classes / f'{mode}.jsa'}",
                            *self._classpath(), MAIN_CLASS, mode],
                           input=lines, capture_output=True, text=True, timeout=120)
        except (OSError, subprocess.TimeoutExpired):
            pass


def _stamp(libs: Path) -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(str(libs.resolve()).encode())
    return digest.hexdigest()


def compiled(version: str, libs: Path, cache: Path = CACHE, javac: str = "javac",
             java: str = "java") -> JavaRuntime:
    """The Java client built against the kafka-clients jar in `libs` (Kafka `version`),
    in a folder named after the version and the stamp: another checkout's source, or a
    later one, builds beside it and never replaces classes a running client uses."""
    want = _stamp(libs)
    classes = cache / f"{version}-{want[:16]}"
    runtime = JavaRuntime(version, libs, classes, java)
    if (classes / STAMP).exists():
        return runtime
    if shutil.which(javac) is None:
        raise JavaClientUnavailable(f"{javac} is missing, so the Java client cannot be compiled "
                                    f"for Kafka {version}: run `make bootstrap` (it installs "
                                    "openjdk-17-jdk-headless)")
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=cache))
    try:
        built = scratch / "classes"
        result = subprocess.run([javac, "-nowarn", "-cp", f"{libs}/*", "-d", str(built),
                                 str(SOURCE)], capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise JavaClientUnavailable(
                f"compiling {SOURCE.name} against Kafka {version} ({libs}) failed: "
                f"{(result.stderr.strip().splitlines() or ['no output'])[0]}")
        packed = scratch / "packed"
        packed.mkdir()
        subprocess.run([str(Path(shutil.which(javac) or javac).with_name("jar")), "cf",
                        str(packed / JAR), "-C", str(built), "."], check=True, timeout=120)
        shutil.rmtree(classes, ignore_errors=True)
        packed.rename(classes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    for mode in MODES:
        runtime.train(mode)
    (classes / STAMP).write_text(want)
    return runtime


if __name__ == "__main__":
    pairs = sys.argv[1:]
    if not pairs or len(pairs) % 2:
        sys.exit("usage: python -m workloads.kafka.java.build VERSION LIBS [VERSION LIBS ...]")
    try:
        for version, libs in zip(pairs[::2], pairs[1::2], strict=True):
            print(compiled(version, Path(libs)).classes)
    except JavaClientUnavailable as error:
        sys.exit(f"java client: {error}")
