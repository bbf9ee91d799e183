"""What a test needs of the machine (root, a tool, a file the bootstrap makes).

Outside `make`, a test whose need is unmet skips with the reason. `make test` and
`make test-unit` set KCHAOS_REQUIRE_ALL=1: there the bootstrap installed everything, so an
unmet need is a missing install step and fails the test instead of hiding behind a skip.
"""

from __future__ import annotations

import os
import shutil
from typing import NoReturn

import pytest

from harness.db.kafka.distribution import CACHE, COMPLETE, DEFAULT_VERSION

REQUIRE_ALL = "KCHAOS_REQUIRE_ALL"


def unmet(reason: str) -> NoReturn:
    """Skip the running test for `reason`, or fail it when every need must be met."""
    if os.environ.get(REQUIRE_ALL) == "1":
        pytest.fail(f"{reason} ({REQUIRE_ALL}=1: `make bootstrap` must provide it)",
                    pytrace=False)
    pytest.skip(reason)


def needs(met: bool, reason: str) -> pytest.MarkDecorator:
    """A mark: the test needs `met` to hold; checked at setup by `unmet`."""
    return pytest.mark.needs(met, reason)


def root() -> pytest.MarkDecorator:
    return needs(os.geteuid() == 0, "needs root")


def tools(*names: str, package: str) -> pytest.MarkDecorator:
    """A mark: the test needs the commands `names`, which Debian's `package` installs."""
    missing = [name for name in names if shutil.which(name) is None]
    return needs(not missing, f"{', '.join(missing)} not installed (Debian package {package})")


def kafka_jars(version: str = DEFAULT_VERSION) -> pytest.MarkDecorator:
    """A mark: the test needs Apache Kafka `version`'s jars, which the bootstrap caches."""
    return needs((CACHE / version / COMPLETE).exists(),
                 f"Apache Kafka {version}'s jars are not cached in {CACHE}")


def check(item: pytest.Item) -> None:
    """Apply every `needs` mark of `item` (conftest calls it before the test's setup)."""
    for mark in item.iter_markers("needs"):
        met, reason = mark.args
        if not met:
            unmet(reason)
