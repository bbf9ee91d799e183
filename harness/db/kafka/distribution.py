"""Apache Kafka's jars: from Maven Central into `.cache/kafka/<version>/libs/`, or a user's
binary distribution (`--kafka-home`).

`fetch(version)` runs Maven on this directory's `pom.xml` (Maven verifies every artifact's
checksum) into a scratch folder and renames it into place, so a cache folder is either
complete or absent; a cached version is returned without running anything, offline.
`from_home(home)` takes `<home>/libs` of an official distribution as it is.
`Distribution.config_names(java)` lists the broker properties that Kafka version knows
(`kafka.server.KafkaConfig.configNames()`), cached beside the jars.

`python -m harness.db.kafka.distribution [VERSION]` fetches one version (the bootstrap's
step) and prints its libs folder.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CACHE", "DEFAULT_VERSION", "VERSIONS", "ZOOKEEPER_VERSION", "Distribution",
           "KafkaUnavailable", "Release", "fetch", "from_home", "resolve"]

POM = Path(__file__).with_name("pom.xml")
CONFIG_NAMES_SOURCE = Path(__file__).with_name("ConfigNames.java")
CACHE = Path(__file__).resolve().parents[3] / ".cache" / "kafka"
# The newest release that starts here (KRaft only), and the newest with ZooKeeper mode.
DEFAULT_VERSION = "4.2.0"
ZOOKEEPER_VERSION = "3.9.1"


@dataclass(frozen=True)
class Release:
    """How a Kafka version is fetched: its Scala build, and the pom's properties that
    make it run on Java 17 (docs/kafka.md)."""

    scala: str
    maven_properties: tuple[str, ...] = ()


# The versions `--kafka-version` offers: each starts a ZooKeeper-mode cluster here.
VERSIONS = {
    "4.2.0": Release("2.13"),
    "4.1.1": Release("2.13"),
    "3.9.1": Release("2.13"),
    "2.8.2": Release("2.13"),
    "2.0.1": Release("2.12", ("kafka.zookeeper=3.5.9",)),
    "0.11.0.3": Release("2.12", ("kafka.jaxb=2.3.1",)),
    "0.10.2.2": Release("2.12", ("kafka.jaxb=2.3.1",)),
}
COMPLETE = ".complete"
_MAIN_JAR = re.compile(r"^kafka_(\d+\.\d+)-(\d[\w.\-]*)\.jar$")


class KafkaUnavailable(RuntimeError):
    """Kafka's jars cannot be had: the message says what failed and what to do."""


@dataclass(frozen=True)
class Distribution:
    """A folder of Kafka's jars and the version they are."""

    version: str
    libs: Path

    @property
    def main_jar(self) -> str:
        """The file name of the broker's own jar (`kafka_<scala>-<version>.jar`)."""
        jar = _broker_jar(self.libs)
        if jar is None:
            raise KafkaUnavailable(f"{self.libs}: no kafka_<scala>-<version>.jar")
        return jar.group(0)

    def config_names(self, java: str = "java") -> frozenset[str]:
        """Every broker property this version knows, from its own `KafkaConfig`."""
        cached = _cache_dir(self) / "config-names.txt"
        if not cached.exists():
            try:
                result = subprocess.run(
                    [java, "-cp", f"{self.libs}/*", str(CONFIG_NAMES_SOURCE)],
                    capture_output=True, text=True, timeout=120)
            except (OSError, subprocess.TimeoutExpired) as error:
                raise KafkaUnavailable(f"cannot run {java} to list Kafka's properties: "
                                       f"{error}") from error
            names = result.stdout.split()
            if result.returncode != 0 or not names:
                raise KafkaUnavailable(
                    f"listing Kafka {self.version}'s properties failed: "
                    f"{(result.stderr.strip().splitlines() or ['no output'])[-1]}")
            cached.parent.mkdir(parents=True, exist_ok=True)
            scratch = cached.with_suffix(".tmp")
            scratch.write_text("\n".join(sorted(names)) + "\n")
            scratch.replace(cached)
        return frozenset(cached.read_text().split())


def _cache_dir(distribution: Distribution) -> Path:
    """Where facts about a distribution are kept: its version folder in the cache, or for
    a `--kafka-home` one named after the folder's path."""
    if distribution.libs.parent.parent == CACHE:
        return distribution.libs.parent
    digest = hashlib.sha256(str(distribution.libs.resolve()).encode()).hexdigest()[:16]
    return CACHE / f"home-{digest}"


def fetch(version: str = DEFAULT_VERSION, cache: Path = CACHE,
          progress=lambda line: print(line, file=sys.stderr, flush=True)) -> Distribution:
    """The cached jars of `version`, downloading them with Maven first when missing."""
    if version not in VERSIONS:
        raise KafkaUnavailable(f"Kafka {version} is not one kchaos runs; choose one of "
                               f"{', '.join(VERSIONS)} or give --kafka-home")
    release = VERSIONS[version]
    folder = cache / version
    libs = folder / "libs"
    if (folder / COMPLETE).exists():
        return Distribution(version, libs)
    if shutil.which("mvn") is None:
        raise KafkaUnavailable("Kafka's jars are not cached and Maven (mvn) is missing: "
                               "run `make bootstrap`, or install maven")
    progress(f"kafka: downloading Apache Kafka {version} from Maven Central into {libs}")
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(prefix=".libs-", dir=folder))
    try:
        result = subprocess.run(
            ["mvn", "-q", "-B", "-f", str(POM), "dependency:copy-dependencies",
             f"-Dkafka.version={version}", f"-Dscala.binary={release.scala}",
             *(f"-D{setting}" for setting in release.maven_properties),
             f"-DoutputDirectory={scratch}", "-DincludeScope=runtime"],
            capture_output=True, text=True, timeout=1800)
        if result.returncode != 0:
            raise KafkaUnavailable(f"Maven could not fetch Kafka {version}: "
                                   f"{_maven_error(result.stdout + result.stderr)}")
        shutil.rmtree(libs, ignore_errors=True)
        scratch.rename(libs)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    (folder / COMPLETE).touch()
    return Distribution(version, libs)


def _maven_error(output: str) -> str:
    """The first line of Maven's output that says what went wrong."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    for line in plain.splitlines():
        text = re.sub(r"^(\[(ERROR|FATAL)\]\s*)+", "", line).strip()
        if text != line.strip() and text and not text.startswith("Some problems"):
            return text
    return plain.strip().splitlines()[-1] if plain.strip() else "no output"


def from_home(home: str | Path) -> Distribution:
    """The jars of an official binary distribution (`<home>/libs`)."""
    libs = Path(home).expanduser().resolve() / "libs"
    if not libs.is_dir():
        raise KafkaUnavailable(f"--kafka-home {home}: no libs/ folder; give the folder an "
                               f"Apache Kafka binary distribution unpacks into")
    jar = _broker_jar(libs)
    if jar is None:
        raise KafkaUnavailable(f"--kafka-home {home}: libs/ holds no "
                               f"kafka_<scala>-<version>.jar")
    return Distribution(jar.group(2), libs)


def _broker_jar(libs: Path) -> re.Match[str] | None:
    """The name of the broker's own jar in `libs`, matched: (scala, version)."""
    for path in sorted(libs.glob("kafka_*.jar")):
        if match := _MAIN_JAR.match(path.name):
            return match
    return None


def resolve(version: str = DEFAULT_VERSION, home: str | Path | None = None) -> Distribution:
    """`--kafka-home` when given, else the cached (or fetched) Maven version."""
    return from_home(home) if home else fetch(version)


if __name__ == "__main__":
    try:
        print(fetch(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_VERSION).libs)
    except KafkaUnavailable as error:
        print(f"kafka: {error}", file=sys.stderr)
        sys.exit(1)
