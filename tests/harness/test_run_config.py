"""`kchaos run` configuration: options declared by the parts, defaults, TOML, command line,
scenarios, `build_test`, and clear errors."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from harness.cli import build_parser
from harness.config import ConfigError, TestConfig, load_config
from harness.options import add_arguments, declared
from harness.scenarios import SCENARIOS
from harness.store import create_run, resolve_run
from harness.test import build_test
from nemesis.package import expand


def test_defaults_are_the_safe_configuration():
    config = load_config()
    assert (config.run.nodes, config.db.zookeeper_nodes(), config.run.time_limit) == (5, 3, 60.0)
    assert config.workload.acks == "all"
    assert config.db.broker_config == {"min.insync.replicas": "2",
                                       "unclean.leader.election.enable": "false"}
    assert set(expand(config.nemesis.nemesis)) >= {"partition-one", "kill", "pause"}


def test_toml_then_command_line(tmp_path):
    toml = tmp_path / "test.toml"
    toml.write_text('name = "nightly"\ntime-limit = 30\nacks = "1"\nlinger-ms = 5\n'
                    '[broker_config]\n"min.insync.replicas" = 1\n"log.segment.bytes" = 1048576\n')
    config = load_config(toml, {"acks": "all", "nodes": None,
                                "broker_config": ["replica.lag.time.max.ms=3000"]})
    assert config.run.name == "nightly" and config.run.time_limit == 30.0
    assert config.workload.linger_ms == 5 and config.workload.acks == "all"
    assert config.run.nodes == 5
    assert config.db.broker_config == {"min.insync.replicas": "1",
                                       "unclean.leader.election.enable": "false",
                                       "log.segment.bytes": "1048576",
                                       "replica.lag.time.max.ms": "3000"}


@pytest.mark.parametrize(("text", "message"), [
    ("nodes = 'many'\n", "nodes must be a whole number, got 'many'"),
    ("colour = 'blue'\n", "unknown key 'colour'"),
    ("acks = '2'\n", "acks must be one of 0, 1, all"),
    ("time_limit = -1\n", "time_limit must be > 0 seconds"),
    ("retries = -2\n", "retries must be >= 0, got -2"),
    ("name = '../x'\n", "name must be a plain folder name"),
    ("nodes = [\n", "not valid TOML"),
    ("broker_config = 3\n", "broker_config must be a table of KEY = VALUE"),
    ("nemesis = 'kill,meteor'\n", "unknown nemesis 'meteor'"),
    ("backend = 'ssh'\n", "the ssh backend needs an inventory"),
])
def test_bad_toml_names_the_file_and_the_problem(tmp_path, text, message):
    toml = tmp_path / "bad.toml"
    toml.write_text(text)
    with pytest.raises(ConfigError, match=message.replace("[", r"\[")) as raised:
        load_config(toml)
    assert str(toml) in str(raised.value)


def test_a_bad_flag_names_the_flag():
    with pytest.raises(ConfigError, match="^--keys must be a whole number, got 'four'$"):
        load_config(None, {"keys": "four"})
    with pytest.raises(ConfigError, match="--broker-config: expected KEY=VALUE"):
        load_config(None, {"broker_config": ["novalue"]})


def test_a_missing_toml_file_is_a_clear_error(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_config(tmp_path / "nope.toml")


def test_the_unclean_scenario_layers_its_configuration_and_stages_its_faults():
    config = load_config(None, {"scenario": "unclean-2013", "seed": 1})
    assert config.db.broker_config["unclean.leader.election.enable"] == "true"
    assert config.db.broker_config["min.insync.replicas"] == "1"
    assert config.run.time_limit == 40.0 and config.nemesis.nemesis == "none"
    scenario = SCENARIOS["unclean-2013"]
    fs = [op["f"] for op in scenario.schedule(config.db.broker_config)]
    assert fs == ["shrink-isr", "heal-targeted"]
    assert scenario.schedule(config.db.broker_config)[0]["value"] == {
        "then": "isolate", "topic": "kchaos", "hold": 2.0}
    times = [op["time"] for op in scenario.schedule(config.db.broker_config)]
    assert times == sorted(times) and times[-1] < config.run.time_limit * 1e9
    test = build_test(config)
    assert [op["f"] for op in test.nemesis.generator] == fs
    assert test.scenario == "unclean-2013" and test.record()["scenario"] == "unclean-2013"
    record = test.record()
    assert record["config"]["nemesis"]["nemesis"] == record["nemesis"] != "none"


def test_command_line_wins_over_the_scenario():
    config = load_config(None, {"scenario": "unclean-2013", "time_limit": "12"})
    assert config.run.time_limit == 12.0


def test_an_unknown_scenario_lists_the_known_ones():
    with pytest.raises(ConfigError, match="unclean-2013"):
        load_config(None, {"scenario": "nope"})


def test_build_test_makes_the_parts_from_the_options():
    config = load_config(None, {"seed": 11, "nodes": 3, "acks": "1", "nemesis": "kill",
                                "checker": "queue,acks"})
    test = build_test(config)
    assert (test.seed, test.nodes, test.db.name, test.workload.name) == (11, 3, "kchaos", "queue")
    assert test.db.spec.brokers == 3 and test.workload.options.acks == "1"
    assert test.checkers == ("queue", "acks") and test.nemesis.faults == ("kill",)
    record = test.record()
    assert record["config"]["run"]["seed"] == 11 and record["config"]["workload"]["acks"] == "1"
    assert record["broker_config"]["min.insync.replicas"] == "2"
    assert build_test(load_config()).checkers == ("queue", "acks", "elections", "defects",
                                                  "availability", "stats", "faults")
    assert build_test(load_config()).seed != build_test(load_config()).seed


def test_the_nemesis_package_outlasts_the_workloads_session_timeout():
    assert build_test(load_config()).nemesis.consumers.session_timeout == 6.0
    config = load_config(None, {"session_timeout_ms": 10000, "nemesis": "pause-consumers"})
    assert build_test(config).nemesis.consumers.session_timeout == 10.0


def test_build_test_refuses_what_the_parts_refuse():
    with pytest.raises(ConfigError, match="unknown checker meteor"):
        build_test(load_config(None, {"checker": "queue,meteor"}))
    with pytest.raises(ConfigError, match="co-located ZooKeepers"):
        build_test(load_config(None, {"nodes": 1, "zookeepers": 3, "colocate": True}))


def test_every_declared_option_is_a_flag_of_kchaos_run_and_a_toml_key(tmp_path):
    parser = build_parser()
    args = parser.parse_args(["run", "--acks", "1", "--zookeepers", "1", "--broker-config",
                              "a=1", "--broker-config", "b=2", "--idempotence"])
    config = load_config(None, vars(args))
    assert (config.workload.acks, config.db.zookeepers, config.workload.idempotence) == \
        ("1", 1, True)
    assert {"a": "1", "b": "2"}.items() <= config.db.broker_config.items()
    for section, options in (("workload", type(config.workload)), ("db", type(config.db))):
        for option in declared(options):
            assert option.flag in parser._subparsers._group_actions[0].choices["run"] \
                .format_help(), (section, option.name)


def test_a_part_declares_its_options_as_dataclass_fields():
    @dataclass(frozen=True)
    class ToyOptions:
        depth: int = field(default=2, metadata={"help": "how deep"})
        colour: str = field(default="red", metadata={"help": "colour",
                                                     "choices": ("red", "blue")})
        internal: float = 1.0

    found = {option.name: option for option in declared(ToyOptions)}
    assert set(found) == {"depth", "colour"}
    assert (found["depth"].kind, found["depth"].default, found["colour"].choices) == \
        ("int", 2, ("red", "blue"))
    import argparse

    parser = argparse.ArgumentParser()
    add_arguments(parser, found.values())
    assert vars(parser.parse_args(["--depth", "3"])) == {"depth": "3", "colour": None}


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


def test_test_config_defaults_match_load_config():
    assert TestConfig() == load_config()


@pytest.mark.parametrize(("overrides", "message"), [
    (["no.such.key=1"], "broker_config: unknown property 'no.such.key'"),
    (["min.insync.replicas=two"], "broker_config: min.insync.replicas='two' is malformed"),
    (["unclean.leader.election.enable=maybe"], "unclean.leader.election.enable='maybe'"),
])
def test_broker_properties_are_judged_by_the_brokers_parser_before_anything_starts(
        overrides, message):
    with pytest.raises(ConfigError, match=message):
        build_test(load_config(None, {"broker_config": overrides}))


def test_a_wrong_type_in_the_toml_broker_config_is_refused_before_anything_starts(tmp_path):
    toml = tmp_path / "bad.toml"
    toml.write_text('[broker_config]\n"log.segment.bytes" = "big"\n')
    with pytest.raises(ConfigError, match="log.segment.bytes='big' is malformed"):
        build_test(load_config(toml))
