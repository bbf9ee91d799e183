"""`Cluster` and a complete chaos run on the docker backend: 3 brokers and 1 ZooKeeper in
containers of the node image on a private dockerd, nemeses unchanged.

The run is `kchaos run --backend docker` as a user types it. Builds the node image:
`make test-docker` sets KCHAOS_DOCKER_IMAGE_TESTS=1.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.control.docker import PrivateDaemon, run_prefixes
from harness.control.docker_image import RUN_LABEL, build_run_image
from harness.db import Cluster, ClusterSpec
from harness.db import down as cluster_down
from nemesis.partition import Firewall, PartitionNemesis
from nemesis.process import KillNemesis
from tests.support import requirements
from tests.support.runs import killed_by_nemesis

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(900),
    pytest.mark.skipif(os.environ.get("KCHAOS_DOCKER_IMAGE_TESTS") != "1",
                       reason="builds the node image: run by `make test-docker`"),
]


@pytest.fixture(scope="module")
def docker_host(tmp_path_factory):
    """(base_url, a prebuilt node image, client) of a private dockerd."""
    if shutil.which("dockerd") is None or shutil.which("debootstrap") is None:
        requirements.unmet("needs dockerd (docker.io) and debootstrap")
    daemon = PrivateDaemon(tmp_path_factory.mktemp("dockerd"))
    client = daemon.start()
    try:
        yield daemon.base_url, build_run_image(client, "kdtest"), client
    finally:
        daemon.stop()


def _left(client, prefix: str) -> list:
    label = {"label": f"{RUN_LABEL}={prefix}"}
    return client.api.containers(all=True, filters=label) + client.api.networks(filters=label)


def _kchaos_run(store: Path, base_url: str, image: str, *options: str,
                zookeepers: str = "1"):
    """`kchaos run` of 20 s on 3 brokers and (unless `zookeepers` is "") 1 ZooKeeper in
    containers, seed 5."""
    return subprocess.run(
        [str(Path(sys.executable).parent / "kchaos"), "run", "--store", str(store),
         "--backend", "docker", "--docker-host", base_url, "--docker-image", image,
         "--time-limit", "20", "--seed", "5", "--nodes", "3",
         *(["--zookeepers", zookeepers] if zookeepers else []), *options],
        capture_output=True, text=True, timeout=600)


def test_cluster_up_nemeses_and_down(docker_host, tmp_path):
    base_url, image, client = docker_host
    spec = ClusterSpec(brokers=3, zookeepers=1, backend="docker",
                       options={"base_url": base_url, "image": image})
    cluster = Cluster.up(spec, state_root=tmp_path)
    try:
        info = cluster.processes()
        assert [n["name"] for n in info["nodes"]] == ["n1", "n2", "n3", "z1"]
        assert all(n["address"].startswith("10.79.") and n["pids"] for n in info["nodes"])
        attached = Cluster.attach(cluster.prefix, tmp_path)
        assert attached.bootstrap_servers == cluster.bootstrap_servers

        partitioner = PartitionNemesis(Firewall(), random.Random(1))
        done = partitioner.invoke(cluster, {"f": "start-partition", "value": "halves"})
        assert done["type"] == "info" and done["value"]
        partitioner.invoke(cluster, {"f": "stop-partition"})
        killer = KillNemesis(random.Random(2))
        killed = killer.invoke(cluster, {"f": "kill", "value": "one"})
        victims = [n for n, what in killed["value"].items() if what == "killed"]
        assert victims and not any(cluster.running(n) for n in victims)
        killer.invoke(cluster, {"f": "start"})
        cluster.broker_set.wait_healthy(timeout=90)
        cluster.detach()
    except BaseException:
        cluster.down()
        raise
    assert run_prefixes(tmp_path) == [cluster.prefix]
    assert cluster_down(state_root=tmp_path) == [cluster.prefix]
    assert _left(client, cluster.prefix) == []
    assert not (tmp_path / cluster.prefix).exists()


def test_safe_run_with_partition_and_kill_faults_is_valid(docker_host, tmp_path, monkeypatch):
    base_url, image, client = docker_host
    store = tmp_path / "store"
    monkeypatch.setenv("KCHAOS_STATE_DIR", str(tmp_path / "state"))
    done = _kchaos_run(store, base_url, image, "--nemesis", "partition,kill",
                       "--nemesis-interval", "4")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = (store / "latest").resolve()
    assert json.loads((run / "results.json").read_text())["valid"] is True
    assert (run / "nodes" / "n1" / "server.log").is_file()
    assert (run / "nodes" / "z1" / "zookeeper.log").is_file()
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    faults = {op["f"] for op in ops if op["process"] == "nemesis" and op["value"] is not None}
    assert faults & {"start-partition", "kill"}, "no fault was injected"
    assert sum(1 for op in ops if op["type"] == "ok" and op["f"] == "send") > 100
    assert run_prefixes(tmp_path / "state", include_owned=True) == []
    assert client.api.containers(all=True, filters={"label": RUN_LABEL}) == []


def test_the_reaper_takes_a_docker_cluster_down_after_kill_9_of_its_owner(docker_host, tmp_path):
    base_url, image, client = docker_host
    script = ("import time\nfrom pathlib import Path\nfrom harness.db import Cluster, ClusterSpec\n"
              f"spec = ClusterSpec(brokers=3, zookeepers=1, backend='docker', "
              f"options={{'base_url': {base_url!r}, 'image': {image!r}}})\n"
              f"c = Cluster.up(spec, state_root=Path({str(tmp_path)!r}))\n"
              "print(c.prefix, flush=True)\ntime.sleep(300)\n")
    owner = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        prefix = owner.stdout.readline().strip()
        assert prefix and _left(client, prefix), "the cluster did not come up"
        owner.kill()
        owner.wait()
        deadline = time.monotonic() + 10
        while (_left(client, prefix) or (tmp_path / prefix).exists()) and \
                time.monotonic() < deadline:
            time.sleep(0.2)
        assert _left(client, prefix) == [] and not (tmp_path / prefix).exists()
    finally:
        if owner.poll() is None:
            owner.kill()
            owner.wait()


def _valid_kafka_run(docker_host, tmp_path: Path, *options: str, zookeepers: str) -> Path:
    """The folder of a valid `_kchaos_run` of `--db kafka` with `options`, after which no
    container of the run is left."""
    base_url, image, client = docker_host
    store = tmp_path / "store"
    done = _kchaos_run(store, base_url, image, "--db", "kafka", *options, zookeepers=zookeepers)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    run = (store / "latest").resolve()
    assert json.loads((run / "results.json").read_text())["valid"] is True
    assert client.api.containers(all=True, filters={"label": RUN_LABEL}) == []
    return run


def test_a_kafka_run_in_containers_gets_the_jars_uploaded_and_is_valid(docker_host, tmp_path,
                                                                       monkeypatch):
    monkeypatch.setenv("KCHAOS_STATE_DIR", str(tmp_path / "state"))
    run = _valid_kafka_run(docker_host, tmp_path, "--kafka-version", "3.9.1", "--nemesis",
                           "kill-leader", "--nemesis-interval", "6", zookeepers="1")
    assert (run / "nodes" / "n1" / "controller.log").is_file()
    assert json.loads((run / "test.json").read_text())["db"] == "kafka"


def test_kafka_4_on_kraft_with_a_dedicated_controller_runs_in_containers(docker_host, tmp_path,
                                                                          monkeypatch):
    monkeypatch.setenv("KCHAOS_STATE_DIR", str(tmp_path / "state"))
    run = _valid_kafka_run(docker_host, tmp_path, "--kafka-version", "4.2.0", "--controllers",
                           "1", "--nemesis", "kill-controller", "--nemesis-interval", "5",
                           zookeepers="")
    test = json.loads((run / "test.json").read_text())
    assert (test["broker"]["metadata"], test["broker"]["quorum"]) == ("kraft", "dynamic")
    assert "process.roles=controller" in (run / "nodes" / "c1" / "server.properties").read_text()
    assert killed_by_nemesis(run, "c1"), "the dedicated controller c1 was never killed"
    assert (run / "nodes" / "c1" / "controller-events.jsonl").stat().st_size > 0
