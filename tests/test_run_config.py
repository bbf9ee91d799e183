"""`kchaos run` configuration: defaults, TOML, command line, scenarios, and clear errors."""

from __future__ import annotations

import pytest

from harness.config import ConfigError, TestConfig, load_config
from harness.run_cli import add_run_commands  # noqa: F401  (the command must import cleanly)
from harness.scenarios import SCENARIOS, apply_scenario
from harness.store import create_run, resolve_run
from nemesis.package import expand


def test_defaults_are_the_safe_configuration():
    config = load_config()
    assert (config.nodes, config.zookeepers, config.time_limit) == (5, 3, 60.0)
    assert config.acks == "all"
    assert config.broker_config == {"min.insync.replicas": "2",
                                    "unclean.leader.election.enable": "false"}
    assert set(expand(config.nemesis)) >= {"partition-one", "kill", "pause"}


def test_toml_then_command_line(tmp_path):
    toml = tmp_path / "test.toml"
    toml.write_text('name = "nightly"\ntime-limit = 30\nacks = "1"\nlinger-ms = 5\n'
                    '[broker_config]\n"min.insync.replicas" = 1\n"log.segment.bytes" = 1048576\n')
    config = load_config(toml, {"acks": "all", "nodes": None,
                                "broker_config": {"replica.lag.time.max.ms": "3000"}})
    assert config.name == "nightly" and config.time_limit == 30.0 and config.linger_ms == 5
    assert config.acks == "all"
    assert config.nodes == 5
    assert config.broker_config == {"min.insync.replicas": "1",
                                    "unclean.leader.election.enable": "false",
                                    "log.segment.bytes": "1048576",
                                    "replica.lag.time.max.ms": "3000"}


@pytest.mark.parametrize(("text", "message"), [
    ("nodes = 'many'\n", "nodes must be int, got 'many'"),
    ("colour = 'blue'\n", "unknown key 'colour'"),
    ("acks = '2'\n", "acks must be one of 0, 1, all"),
    ("time_limit = -1\n", "time_limit must be > 0 seconds"),
    ("retries = -2\n", "retries and linger_ms must be >= 0"),
    ("name = '../x'\n", "name must be a plain folder name"),
    ("nodes = [\n", "not valid TOML"),
])
def test_bad_toml_names_the_file_and_the_problem(tmp_path, text, message):
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")):
        load_config(toml)


def test_a_missing_toml_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


def test_the_unclean_scenario_sets_its_configuration_and_stages_its_faults():
    config, scenario = apply_scenario(TestConfig(scenario="unclean-2013", seed=1))
    assert scenario is SCENARIOS["unclean-2013"]
    assert config.broker_config["unclean.leader.election.enable"] == "true"
    assert config.broker_config["min.insync.replicas"] == "1"
    fs = [op["f"] for op in scenario.schedule(config)]
    assert fs == ["start-partition", "expire-session", "stop-partition"]
    times = [op["time"] for op in scenario.schedule(config)]
    assert times == sorted(times) and times[-1] < config.time_limit * 1e9


def test_an_unknown_scenario_lists_the_known_ones():
    with pytest.raises(ValueError, match="unclean-2013"):
        apply_scenario(TestConfig(scenario="nope"))


def test_store_layout_and_latest_links(tmp_path):
    first = create_run(tmp_path, "queue", now=0)
    second = create_run(tmp_path, "queue", now=0)
    assert first != second and first.parent == tmp_path / "queue"
    (second / "test.json").write_text("{}")
    assert resolve_run(tmp_path) == second.resolve()
    assert resolve_run(tmp_path / "queue") == second.resolve()
    assert (tmp_path / "latest").resolve() == second.resolve()
    with pytest.raises(FileNotFoundError, match="not a run folder"):
        resolve_run(first)
