"""`make test-vagrant`: virtual machines of vagrant/Vagrantfile, end to end, as a user runs
them (libvirt's qemu driver unless KCHAOS_LIBVIRT_DRIVER=kvm).

The box is built or reused (`make vagrant-box`), libvirtd starts in its own network
namespace, `vagrant up` brings up 2 brokers and 1 ZooKeeper (1 vCPU and 1 GiB each: the
machine has 2 cores, shared), `kchaos run --backend vagrant` provisions kchaos on them over
SSH and runs a 60 s safe test with partitions and `crash-vm`, which must be valid; then
`vagrant destroy -f` and the namespace's teardown leave nothing behind. Each phase's
seconds are printed (about 10 minutes here). A second test does the same with Kafka 4.2.0
on KRaft: 2 broker VMs and a dedicated controller VM, no ZooKeeper, the controller killed.
Needs root: set KCHAOS_VAGRANT_TESTS=1.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.control import libvirt_host
from harness.control.vagrant_box import BoxRecipe, default_box_cache, ensure_box, register_box
from nemesis.package import FAULTS, expand, schedule_steps
from tests.support.runs import killed_by_nemesis, nemesis_completions

pytestmark = [
    pytest.mark.cluster,
    pytest.mark.timeout(3600),
    pytest.mark.skipif(os.environ.get("KCHAOS_VAGRANT_TESTS") != "1",
                       reason="KVM machines: set KCHAOS_VAGRANT_TESTS=1 (make test-vagrant)"),
]

VAGRANT_DIR = Path(__file__).resolve().parents[2] / "vagrant"
KCHAOS = str(Path(sys.executable).with_name("kchaos"))
# Emulated CPUs unless KCHAOS_LIBVIRT_DRIVER=kvm: guests of this machine's nested KVM run
# about 10^4 times slower than under emulation (the kernel's decompressor copies ~15 KB/s).
MACHINES = {"KCHAOS_BROKERS": "2", "KCHAOS_ZOOKEEPERS": "1", "KCHAOS_MEMORY": "1024",
            "KCHAOS_CPUS": "1", "KCHAOS_PROVIDER": "libvirt", "VAGRANT_CHECKPOINT_DISABLE": "1",
            "KCHAOS_LIBVIRT_DRIVER": os.environ.get("KCHAOS_LIBVIRT_DRIVER") or "qemu"}
NEMESIS = "partition-one,partition-halves,isolate-controller,crash-vm"
TIME_LIMIT = 60


def first_seed_with_crash_and_partition() -> int:
    """A seed whose schedule crashes a machine and partitions the network."""
    for seed in range(1, 1000):
        fs = {FAULTS[step.name].start for step in schedule_steps(expand(NEMESIS), seed, TIME_LIMIT)}
        if {"crash-vm", "start-partition"} <= fs:
            return seed
    raise AssertionError("no seed schedules both faults")


def in_namespace(argv: list[str], cwd: Path, timeout: float,
                 machines: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    done = subprocess.run(libvirt_host.exec_argv(argv), cwd=cwd, capture_output=True,
                          text=True, timeout=timeout,
                          env={**os.environ, **(machines or MACHINES),
                               "SPARK_LOCAL_IP": "127.0.0.1"})
    print(f"$ {' '.join(argv)}  -> exit {done.returncode}\n{done.stdout[-3000:]}"
          f"{done.stderr[-3000:]}", flush=True)
    return done


@contextlib.contextmanager
def virtual_machines(tmp_path: Path, machines: dict[str, str]):
    """The box (built or cached), libvirtd in its namespace and `vagrant up` of `machines`
    in a copy of vagrant/; yields (the copy, seconds per phase), then destroys them all
    and prints the seconds."""
    if libvirt_host.running():
        pytest.fail("a libvirt host is up already, and this test's teardown would destroy its "
                    "machines: `python -m harness.control.libvirt_host down` first")
    seconds: dict[str, float] = {}
    started = time.monotonic()
    box, built = ensure_box(BoxRecipe.default(), default_box_cache())
    register_box(box)
    seconds["box built" if built else "box cached"] = time.monotonic() - started
    vagrant_dir = tmp_path / "vagrant"
    vagrant_dir.mkdir()
    shutil.copy(VAGRANT_DIR / "Vagrantfile", vagrant_dir / "Vagrantfile")
    libvirt_host.up()
    try:
        started = time.monotonic()
        done = in_namespace(["vagrant", "up"], vagrant_dir, 1800, machines)
        seconds["vagrant up"] = time.monotonic() - started
        assert done.returncode == 0, "vagrant up failed"
        yield vagrant_dir, seconds
    finally:
        started = time.monotonic()
        in_namespace(["vagrant", "destroy", "-f"], vagrant_dir, 600, machines)
        libvirt_host.down()
        seconds["destroy"] = time.monotonic() - started
        print("seconds: " + ", ".join(f"{k} {v:.0f}" for k, v in seconds.items()), flush=True)
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert libvirt_host.NAMESPACE not in namespaces
    assert not libvirt_host.running()


def test_safe_run_with_partitions_and_crash_vm_on_virtual_machines(tmp_path):
    store = tmp_path / "store"
    with virtual_machines(tmp_path, MACHINES) as (vagrant_dir, seconds):
        started = time.monotonic()
        done = in_namespace([KCHAOS, "run", "--backend", "vagrant", "--vagrant-dir",
                             str(vagrant_dir), "--accept-new-host-keys", "--nodes", "2",
                             "--zookeepers", "1", "--time-limit", str(TIME_LIMIT),
                             "--nemesis", NEMESIS,
                             "--seed", str(first_seed_with_crash_and_partition()),
                             "--store", str(store)], vagrant_dir, 1800)
        seconds["kchaos run"] = time.monotonic() - started
        run = (store / "latest").resolve()
        results = json.loads((run / "results.json").read_text())
        assert done.returncode == 0 and results["valid"] is True, json.dumps(results)[:3000]
        nemesis = nemesis_completions(run)
        crashed = [op for op in nemesis if op["f"] == "crash-vm"
                   and isinstance(op["value"], dict) and "powered-off" in op["value"].values()]
        restarted = [op for op in nemesis if op["f"] == "start-vm"
                     and isinstance(op["value"], dict)]
        assert crashed and restarted, [(op["f"], op["value"]) for op in nemesis]
        assert any(op["f"] == "start-partition" for op in nemesis)


# Kafka 4.2.0 on KRaft: 2 brokers and a dedicated controller, no ZooKeeper; the JVMs need
# more memory than our broker
KRAFT_MACHINES = {**MACHINES, "KCHAOS_ZOOKEEPERS": "0", "KCHAOS_CONTROLLERS": "1",
                  "KCHAOS_MEMORY": "1536"}


def test_kafka_4_on_kraft_with_a_dedicated_controller_on_virtual_machines(tmp_path):
    store = tmp_path / "store"
    with virtual_machines(tmp_path, KRAFT_MACHINES) as (vagrant_dir, seconds):
        started = time.monotonic()
        done = in_namespace([KCHAOS, "run", "--backend", "vagrant", "--vagrant-dir",
                             str(vagrant_dir), "--accept-new-host-keys", "--db", "kafka",
                             "--kafka-version", "4.2.0", "--nodes", "2", "--controllers", "1",
                             "--heap", "512m", "--start-timeout", "900",
                             "--time-limit", str(TIME_LIMIT), "--nemesis", "kill-controller",
                             "--nemesis-interval", "15", "--seed", "1",
                             "--store", str(store)], vagrant_dir, 2400, KRAFT_MACHINES)
        seconds["kchaos run"] = time.monotonic() - started
        run = (store / "latest").resolve()
        results = json.loads((run / "results.json").read_text())
        assert done.returncode == 0 and results["valid"] is True, json.dumps(results)[:3000]
        test = json.loads((run / "test.json").read_text())
        assert (test["broker"]["metadata"], test["broker"]["quorum"]) == ("kraft", "dynamic")
        assert killed_by_nemesis(run, "c1"), "the dedicated controller c1 was never killed"
        assert (run / "nodes" / "c1" / "controller-events.jsonl").stat().st_size > 0
