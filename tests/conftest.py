"""Shared fixtures (a ZooKeeper and a Spark session per test session, on loopback) and the
hooks of tests/support: a test's needs of the machine, the fast tier's promise; property
tests unmeasured by coverage."""

from __future__ import annotations

import pytest

from tests.support import requirements, tiers
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


def pytest_configure(config):
    tiers.install()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    requirements.check(item)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    with tiers.watching(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    if (why := tiers.refusal(item.nodeid)) and not report.failed:
        report.outcome, report.longrepr = "failed", why
    return report


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test marked `long` or `clients` must be heavy too (tiers.misplaced). Property-based
    tests (hypothesis) run without coverage: they repeat the paths the example tests cover,
    thousands of times, at twice the CPU under coverage's tracer."""
    for item in items:
        if why := tiers.misplaced(item):
            raise pytest.UsageError(why)
        if hasattr(getattr(item, "obj", None), "hypothesis"):
            item.add_marker(pytest.mark.no_cover)
