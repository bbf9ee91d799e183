"""broker/config.py: Kafka property names, strict validation, errors naming file and line."""

from __future__ import annotations

import subprocess
import sys

import pytest

from broker.config import BrokerConfig, ConfigError, Listener

VALID = """\
# a comment
broker.id=3
listeners=PLAINTEXT://127.0.0.1:9092,CONTROLLER://127.0.0.1:9093
zookeeper.connect=127.0.0.1:2181/kchaos
log.dirs=/tmp/a,/tmp/b
min.insync.replicas = 2
unclean.leader.election.enable=true
replication.truncation.mode=high-watermark
broker.rack=r1
"""


def test_valid_file_is_typed(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(VALID)
    config = BrokerConfig.from_properties(path)
    assert config.broker_id == 3
    assert config.client_listener == Listener("PLAINTEXT", "127.0.0.1", 9092)
    assert config.control_listener == Listener("CONTROLLER", "127.0.0.1", 9093)
    assert config.min_insync_replicas == 2
    assert config.unclean_leader_election_enable is True
    assert config.replication_truncation_mode == "high-watermark"
    assert [str(p) for p in config.data_dirs] == ["/tmp/a", "/tmp/b"]
    assert config.broker_rack == "r1"
    assert config.replica_lag_time_max_ms == 30000
    assert config.retention_ms == 168 * 3600 * 1000


@pytest.mark.parametrize("line, message", [
    ("log.retention.foo=1", "unknown property 'log.retention.foo'"),
    ("num.partitions=zero", "num.partitions='zero' is malformed: expected an integer"),
    ("num.partitions=0", "must be within"),
    ("auto.create.topics.enable=yes", "expected true or false"),
    ("controlled.shutdown.enable=1", "expected true or false"),
    ("broker.id=4", "already set on line 2"),
])
def test_bad_line_names_file_line_and_key(tmp_path, line, message):
    path = tmp_path / "server.properties"
    path.write_text(VALID + line + "\n")
    with pytest.raises(ConfigError) as error:
        BrokerConfig.from_properties(path)
    assert f"{path}:10:" in str(error.value)
    assert message in str(error.value)


def test_missing_required_and_listener_checks():
    with pytest.raises(ConfigError, match="required property 'zookeeper.connect'"):
        BrokerConfig.from_text("broker.id=1\nlisteners=PLAINTEXT://h:1,CONTROLLER://h:2\n")
    with pytest.raises(ConfigError, match="control plane listener"):
        BrokerConfig.from_text("broker.id=1\nlisteners=PLAINTEXT://h:1\nzookeeper.connect=z\n"
                               "log.dirs=/x\n")
    with pytest.raises(ConfigError, match="expected NAME://host:port"):
        BrokerConfig.from_text("broker.id=1\nlisteners=PLAINTEXT:/h:1\nzookeeper.connect=z\n")


@pytest.mark.cluster  # starts the broker program, which refuses the file before it serves
def test_command_line_exits_2_on_bad_config(tmp_path):
    path = tmp_path / "server.properties"
    path.write_text(VALID + "no.such.key=1\n")
    result = subprocess.run([sys.executable, "-m", "broker", "--config", str(path)],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert f"{path}:10: unknown property 'no.such.key'" in result.stderr
