"""The Java client's classes: `KchaosClient.java` compiled against one Kafka version's jars.

`compiled(version, libs)` returns the `JavaRuntime` of that version, compiling the source
into `.cache/java-clients/<version>/` only when the source (or the jars' folder) changed
since the last compile (a sha256 stamp), so a second call costs nothing. The bootstrap
compiles the versions it caches (`python -m workloads.kafka.java.build VERSION LIBS ...`);
the harness compiles any other version a run asks for, once.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CACHE", "JavaClientUnavailable", "JavaRuntime", "SOURCE", "compiled"]

HERE = Path(__file__).resolve().parent
SOURCE = HERE / "KchaosClient.java"
LOG_CONFIG = HERE / "log4j.properties"
CACHE = HERE.parents[2] / ".cache" / "java-clients"
MAIN_CLASS = "KchaosClient"
STAMP = ".stamp"
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
        """The child's command line: `mode` is "queue" or "member"."""
        return [self.java, *JVM_OPTIONS, f"-Dlog4j.configuration=file:{LOG_CONFIG}",
                "-cp", f"{self.classes}:{self.libs}/*", MAIN_CLASS, mode]


def _stamp(libs: Path) -> str:
    digest = hashlib.sha256(SOURCE.read_bytes())
    digest.update(str(libs.resolve()).encode())
    return digest.hexdigest()


def compiled(version: str, libs: Path, cache: Path = CACHE, javac: str = "javac",
             java: str = "java") -> JavaRuntime:
    """The Java client built against the kafka-clients jar in `libs` (Kafka `version`)."""
    classes = cache / version
    runtime = JavaRuntime(version, libs, classes, java)
    want = _stamp(libs)
    stamp = classes / STAMP
    if stamp.exists() and stamp.read_text() == want and (classes / f"{MAIN_CLASS}.class").exists():
        return runtime
    if shutil.which(javac) is None:
        raise JavaClientUnavailable(f"{javac} is missing, so the Java client cannot be compiled "
                                    f"for Kafka {version}: run `make bootstrap` (it installs "
                                    "openjdk-17-jdk-headless)")
    cache.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=f".{version}-", dir=cache))
    try:
        result = subprocess.run([javac, "-nowarn", "-cp", f"{libs}/*", "-d", str(scratch),
                                 str(SOURCE)], capture_output=True, text=True, timeout=300)
        if result.returncode != 0:
            raise JavaClientUnavailable(
                f"compiling {SOURCE.name} against Kafka {version} ({libs}) failed: "
                f"{(result.stderr.strip().splitlines() or ['no output'])[0]}")
        (scratch / STAMP).write_text(want)
        shutil.rmtree(classes, ignore_errors=True)
        scratch.rename(classes)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
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
