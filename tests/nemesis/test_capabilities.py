"""What faults ask of a db: the base every nemesis extends, the capability protocols, and
a fault refused before the run by a db that lacks what it needs (through `kchaos run`,
which then starts nothing)."""

from __future__ import annotations

import random

import pytest

from harness.cli import main
from harness.config import ConfigError, load_config
from harness.control.backends import BackendOptions
from harness.db.cluster import Cluster
from harness.db.kafka.distribution import CACHE, COMPLETE, DEFAULT_VERSION
from harness.db.kchaos import KchaosOptions
from harness.db.kchaos import build as build_kchaos
from harness.db.part import DBContext
from harness.test import build_test
from nemesis.base import NO_TARGET, BaseNemesis, completed, no_target, skipped
from nemesis.capabilities import (
    NAMES,
    CutsClients,
    HasController,
    HasZooKeeper,
    LosesUnflushed,
    Nodes,
    Offer,
    VMControl,
    refusal,
    require,
)
from nemesis.package import FAULTS, GROUPS, compose, expand
from nemesis.targets import leader_and_followers
from tests.support.fake_cluster import FakeCluster

KNOB = {"kchaos.debug.lose-unflushed-on-crash": "true"}
OP = {"type": "invoke", "process": "nemesis", "f": "poke", "value": "one"}


class Poke(BaseNemesis):
    fs = frozenset({"poke"})

    def invoke(self, cluster, op):
        return no_target(op) if op["value"] == "none" else completed(op, {"n1": "poked"})


def test_the_base_sets_up_and_tears_down_nothing_and_completes_ops_as_info():
    cluster = FakeCluster()
    nemesis = Poke()
    assert nemesis.setup(cluster) is None and nemesis.teardown(cluster) is None
    assert nemesis.invoke(cluster, OP) == {**OP, "type": "info", "value": {"n1": "poked"}}
    assert nemesis.invoke(cluster, {**OP, "value": "none"})["value"] == NO_TARGET == "no-target"
    assert skipped(OP, "no groups") == {**OP, "type": "info", "value": {"skipped": "no groups"}}
    assert compose([nemesis]).invoke(cluster, OP)["value"] == {"n1": "poked"}
    with pytest.raises(NotImplementedError, match="BaseNemesis handles no op 'poke'"):
        BaseNemesis().invoke(cluster, OP)


def test_require_names_the_missing_capability():
    cluster = FakeCluster()
    assert require(cluster, HasController) is cluster
    assert require(cluster, HasZooKeeper).zookeepers == ("z1",)
    with pytest.raises(TypeError, match="FakeCluster has no VM control"):
        require(cluster, VMControl)


def test_every_fault_names_known_capabilities_and_all_leaves_out_the_extras():
    for fault in FAULTS.values():
        assert set(fault.needs) <= set(NAMES), fault
    assert "crash-vm" not in GROUPS["all"] and "crash-lose-unflushed" not in GROUPS["all"]
    assert FAULTS["isolate-zookeeper"].needs != FAULTS["isolate-controller"].needs
    assert HasZooKeeper not in FAULTS["kill-controller"].needs, \
        "a controller is not ZooKeeper: a db without ZooKeeper can still lose its controller"
    offer = Offer("--db toy", frozenset(), {VMControl: "use --backend vagrant"})
    assert refusal("kill", (), offer) is None
    assert refusal("crash-vm", FAULTS["crash-vm"].needs, offer) == \
        "--nemesis crash-vm needs VM control; use --backend vagrant"
    assert refusal("isolate-controller", FAULTS["isolate-controller"].needs, offer) == \
        "--nemesis isolate-controller needs a network it can partition; --db toy has none"


def test_a_running_cluster_implements_every_capability_its_db_offers():
    context = DBContext(3, BackendOptions(backend="vagrant", vagrant_dir="/nonexistent"))
    offer = build_kchaos(KchaosOptions(broker_config=KNOB), context).offer()
    assert VMControl in offer.has and LosesUnflushed in offer.has
    for capability in offer.has:
        members = [name for name in dir(capability) if not name.startswith("_")]
        missing = [name for name in members if not hasattr(Cluster, name)]
        assert not missing, f"Cluster lacks {missing} of {capability.__name__}"
    assert not [name for name in dir(Nodes) if not name.startswith("_")
                and not hasattr(Cluster, name)]


def test_what_the_kchaos_db_offers_depends_on_its_backend_and_properties():
    local = build_kchaos(KchaosOptions(), DBContext(3, BackendOptions()))
    assert VMControl not in local.offer().has and LosesUnflushed not in local.offer().has
    assert HasController in local.offer().has and HasZooKeeper in local.offer().has
    with pytest.raises(ConfigError, match="--nemesis crash-lose-unflushed needs brokers that "
                                          "lose their unflushed data when killed; --db "
                                          "kchaos has them only with --broker-config "
                                          "kchaos.debug.lose-unflushed-on-crash=true"):
        build_test(load_config(None, {"nemesis": "kill,crash-lose-unflushed"}))
    build_test(load_config(None, {"nemesis": "crash-lose-unflushed",
                                  "broker_config": [f"{k}={v}" for k, v in KNOB.items()]}))


@pytest.mark.skipif(not (CACHE / DEFAULT_VERSION / COMPLETE).exists(),
                    reason="Kafka's jars are not cached: make bootstrap")
def test_apache_kafka_refuses_the_simulated_power_loss_and_says_why():
    with pytest.raises(ConfigError, match="--nemesis crash-lose-unflushed needs brokers that "
                                          "lose their unflushed data when killed; --db "
                                          "kafka has none: Apache Kafka has no property"):
        build_test(load_config(None, {"db": "kafka", "nemesis": "crash-lose-unflushed"}))
    build_test(load_config(None, {"db": "kafka", "nemesis": "all"}))


def test_kchaos_run_refuses_a_fault_the_db_cannot_serve_before_anything_starts(
        tmp_path, monkeypatch, capsys):
    state, store = tmp_path / "state", tmp_path / "store"
    monkeypatch.setenv("KCHAOS_STATE_DIR", str(state))
    code = main(["run", "--nemesis", "partition-one,crash-vm", "--time-limit", "5",
                 "--store", str(store)])
    assert code == 3
    assert capsys.readouterr().err.strip() == (
        "kchaos run: --nemesis crash-vm needs VM control; --db kchaos on --backend local "
        "has none: use --backend vagrant")
    assert not state.exists() and not store.exists(), "nothing was provisioned or stored"


def test_isolate_clients_runs_where_the_clients_address_is_known_and_is_refused_elsewhere():
    local = build_kchaos(KchaosOptions(), DBContext(3, BackendOptions())).offer()
    assert CutsClients in local.has
    assert not [name for name in dir(CutsClients) if not name.startswith("_")
                and not hasattr(Cluster, name)]
    ssh = build_kchaos(KchaosOptions(), DBContext(3, BackendOptions(
        backend="ssh", inventory="/nonexistent.toml"))).offer()
    assert CutsClients not in ssh.has
    assert refusal("isolate-clients", FAULTS["isolate-clients"].needs, ssh) == (
        "--nemesis isolate-clients needs the clients' address on the nodes' network; on "
        "--backend ssh the clients reach the nodes from addresses kchaos does not know: use "
        "--backend local or docker")
    assert "isolate-clients" in GROUPS["partition"] and "isolate-clients" not in GROUPS["all"]
    assert "partition-one-way" in GROUPS["all"]


def test_the_all_group_runs_on_every_backend():
    build_test(load_config(None, {"nemesis": "all"}))
    assert set(expand("all")) == set(GROUPS["all"])


def test_faults_pick_targets_through_the_protocols_only():
    cluster = FakeCluster()
    assert isinstance(cluster, HasController) and cluster.controller() == "n2"
    state, leader, followers = leader_and_followers(cluster, random.Random(1))
    assert (state.topic, leader, followers) == ("t", "n4", ["n5", "n1"])
