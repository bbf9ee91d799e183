"""The metadata mode a test ran in, from what its test.json recorded."""

from __future__ import annotations

import pytest

from checker.modes import KRAFT, KRAFT_ELR, ZOOKEEPER, MetadataMode, mode_of


def kafka_run(version: str, metadata: str | None = None) -> dict:
    """A kafka run's test map as test.json records the options asked (no broker started)."""
    return {"db": "kafka", "config": {"db": {"kafka_version": version, "kafka_home": None,
                                             "metadata": metadata}}}


@pytest.mark.parametrize(("test", "mode"), [
    ({"db": "kchaos", "broker": {"kind": "kchaos", "python": "python3"}}, ZOOKEEPER),
    ({}, ZOOKEEPER),
    (kafka_run("3.9.1"), ZOOKEEPER),
    (kafka_run("3.9.1", "zookeeper"), ZOOKEEPER),
    (kafka_run("3.9.1", "kraft"), KRAFT),
    (kafka_run("0.10.2.2"), ZOOKEEPER),
    (kafka_run("4.0.0"), KRAFT),
    (kafka_run("4.1.1"), KRAFT_ELR),
    (kafka_run("4.2.0"), KRAFT_ELR),
], ids=["kchaos", "no-db", "kafka-3.9.1", "kafka-3.9.1-zookeeper", "kafka-3.9.1-kraft",
        "kafka-0.10.2.2", "kafka-4.0.0", "kafka-4.1.1", "kafka-4.2.0"])
def test_the_mode_is_the_recorded_metadata_option_or_the_versions_default(
        test: dict, mode: MetadataMode):
    assert mode_of(test) == mode


def test_the_started_brokers_version_and_mode_win_over_the_options_asked():
    home = {"db": "kafka", "broker": {"kind": "kafka", "version": "4.1.1", "metadata": "kraft"},
            "config": {"db": {"kafka_version": "3.9.1", "kafka_home": "/opt/kafka",
                              "metadata": None}}}
    assert mode_of(home) == KRAFT_ELR
    started_3_9 = {"db": "kafka", "broker": {"kind": "kafka", "version": "3.9.1",
                                             "metadata": "kraft"}}
    assert mode_of(started_3_9) == KRAFT


def test_a_build_of_its_own_counts_as_recent_and_no_version_as_before_4_0():
    assert mode_of(kafka_run("trunk-SNAPSHOT")) == KRAFT_ELR
    assert mode_of({"db": "kafka"}) == ZOOKEEPER
    assert mode_of({"db": "kafka", "config": {"db": {"metadata": "kraft"}}}) == KRAFT


def test_results_name_the_modes():
    assert [m.name for m in (ZOOKEEPER, KRAFT, KRAFT_ELR)] == ["zookeeper", "kraft", "kraft-elr"]
