"""Shared fixtures: a ZooKeeper per test session, on loopback."""

from __future__ import annotations

import pytest

from tests.support import requirements
from tests.support.zookeeper import start_zookeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A standalone ZooKeeper for the whole session; yields its connect string."""
    zk = start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture(scope="session")
def spark():
    """One local Spark session for the whole test session (it takes seconds to start)."""
    from checker.spark import spark_session

    with spark_session("local[2]", app_name="kchaos-tests") as session:
        yield session


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    requirements.check(item)
