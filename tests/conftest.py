"""Shared fixtures: a ZooKeeper per test session, on loopback."""

from __future__ import annotations

import pytest

from tests.zookeeper import start_zookeeper


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    """A standalone ZooKeeper for the whole session; yields its connect string."""
    zk = start_zookeeper(tmp_path_factory.mktemp("zookeeper"))
    try:
        yield zk
    finally:
        zk.stop()
