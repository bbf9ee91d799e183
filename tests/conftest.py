"""Shared fixtures: a ZooKeeper per test session, on loopback; property tests unmeasured."""

from __future__ import annotations

import pytest

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


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Property-based tests (hypothesis) run without coverage: they repeat the paths the
    example tests cover, thousands of times, at twice the CPU under coverage's tracer."""
    for item in items:
        if hasattr(getattr(item, "obj", None), "hypothesis"):
            item.add_marker(pytest.mark.no_cover)
