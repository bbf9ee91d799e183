"""The fast tier's promise (`make test-unit`): a test marked neither `cluster` nor `spark`
starts no ZooKeeper, no broker (ours or Apache Kafka) and no Spark.

conftest runs each test inside `watching(item)`: while a light test (its setup, its call and
its teardown, and the session fixtures it is the first to ask for) runs, every
`subprocess.Popen` of such a process is refused and the test fails, naming the marks.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator

import pytest

HEAVY_MARKERS = ("cluster", "spark")
OWN_TARGET_MARKERS = ("long", "clients")  # heavy tests that `make test` leaves to own targets

_running: list[str] = []  # the light test now running, if any
_refused: dict[str, str] = {}  # nodeid -> what it tried to start


class HeavyProcessRefused(RuntimeError):
    """A light test started what only a `cluster` or `spark` test may."""


def heavy(argv: object) -> str | None:
    """What `argv` would start that makes a test heavy, or None."""
    if isinstance(argv, (str, bytes, os.PathLike)):
        words = [os.fsdecode(argv)]
    else:
        words = [os.fsdecode(word) for word in argv]  # type: ignore[attr-defined]
    if any(word.startswith("org.apache.zookeeper.server.") for word in words):
        return "a ZooKeeper"
    if "kafka.Kafka" in words:
        return "an Apache Kafka broker"
    if any(words[i:i + 2] == ["-m", "broker"] for i in range(len(words) - 1)):
        return "a kchaos broker"
    if any(os.path.basename(word) == "spark-submit" or word.startswith("org.apache.spark.")
           for word in words):
        return "Spark"
    return None


def is_light(item: pytest.Item) -> bool:
    return not any(item.get_closest_marker(name) for name in HEAVY_MARKERS)


@contextlib.contextmanager
def watching(item: pytest.Item) -> Iterator[None]:
    """While `item` runs: if it is light, refuse any heavy process it starts."""
    if not is_light(item):
        yield
        return
    _running.append(item.nodeid)
    try:
        yield
    finally:
        _running.remove(item.nodeid)


def misplaced(item: pytest.Item) -> str | None:
    """Why `item`'s marks would put it in the fast tier that its own target exists to spare
    `make test`, or None."""
    own = [name for name in OWN_TARGET_MARKERS if item.get_closest_marker(name)]
    if own and is_light(item):
        return (f"{item.nodeid} is marked {' and '.join(own)} but neither "
                f"{' nor '.join(HEAVY_MARKERS)}: `make test-unit` would run it")
    return None


def refusal(nodeid: str) -> str | None:
    """Why the test `nodeid` broke this tier's promise (once), or None."""
    return _refused.pop(nodeid, None)


def install() -> None:
    """Wrap `subprocess.Popen` once for the session."""
    original = subprocess.Popen.__init__

    def guarded(self, args, *rest, **options):
        if _running and (what := heavy(args)):
            message = (f"{_running[-1]} started {what} but is marked neither "
                       f"{' nor '.join(HEAVY_MARKERS)}: mark it (pytest.mark.cluster or "
                       "pytest.mark.spark) so `make test-unit` leaves it out")
            _refused[_running[-1]] = message
            raise HeavyProcessRefused(message)
        original(self, args, *rest, **options)

    subprocess.Popen.__init__ = guarded  # type: ignore[method-assign]
