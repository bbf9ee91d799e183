"""The test suite's own rules: an unmet need fails under `make test`, the fast tier
refuses ZooKeeper, brokers and Spark to a test marked neither `cluster` nor `spark`, and a
test left to `make test-long` or `make test-clients` is one of those."""

from __future__ import annotations

import subprocess
import sys

import pytest

from harness.db.zookeeper import MAIN_CLASS
from tests.support import requirements, tiers


def test_an_unmet_need_skips_outside_make(monkeypatch):
    monkeypatch.delenv(requirements.REQUIRE_ALL, raising=False)
    with pytest.raises(pytest.skip.Exception, match="no frobnicator"):
        requirements.unmet("no frobnicator")


def test_an_unmet_need_fails_under_make_test(monkeypatch):
    monkeypatch.setenv(requirements.REQUIRE_ALL, "1")
    with pytest.raises(pytest.fail.Exception, match="no frobnicator.*make bootstrap"):
        requirements.unmet("no frobnicator")


def test_a_missing_tool_names_its_debian_package():
    mark = requirements.tools("sh", "kchaos-no-such-tool", package="frob")
    assert mark.args == (False, "kchaos-no-such-tool not installed (Debian package frob)")


@pytest.mark.parametrize("argv, what", [
    (["java", "-cp", "zk.jar", MAIN_CLASS, "zoo.cfg"], "a ZooKeeper"),
    (["ip", "netns", "exec", "n1", "java", "-cp", "libs/*", "kafka.Kafka", "s.properties"],
     "an Apache Kafka broker"),
    ([sys.executable, "-m", "broker", "--config", "server.properties"], "a kchaos broker"),
    (["/opt/pyspark/bin/spark-submit", "pyspark-shell"], "Spark"),
    (["java", "-cp", "libs/*", "ConfigNames.java"], None),
    (["kcat", "-L"], None),
    ("echo -m broker", None),
])
def test_what_makes_a_process_heavy(argv, what):
    assert tiers.heavy(argv) == what


def test_a_long_test_must_be_heavy(request):
    long_test = pytest.Function.from_parent(
        request.node.parent, name="long_test", callobj=lambda: None)
    long_test.add_marker(pytest.mark.long)
    assert "marked long but neither cluster nor spark" in tiers.misplaced(long_test)
    long_test.add_marker(pytest.mark.cluster)
    assert tiers.misplaced(long_test) is None


def test_a_light_test_may_start_light_processes():
    assert subprocess.run(["true"]).returncode == 0


def test_a_light_test_may_not_start_a_broker(request):
    with pytest.raises(tiers.HeavyProcessRefused, match="marked neither cluster nor spark"):
        subprocess.run([sys.executable, "-m", "broker", "--config", "/nonexistent"])
    assert "a kchaos broker" in tiers.refusal(request.node.nodeid)  # taken: the test passes
