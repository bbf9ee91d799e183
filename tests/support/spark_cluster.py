"""A Spark standalone cluster on loopback for tests, from pyspark's own jars.

`spark_cluster(directory)` starts one master and workers of one core each
(`spark-class org.apache.spark.deploy.{master.Master,worker.Worker}`), waits until
every worker is registered (the master web UI's `/json/`), and stops them all on
exit: each process group is terminated, then anything still running that the
cluster started is killed by PID. With `hide`, each worker starts in its own mount
namespace where an empty tmpfs covers that folder, so its executors cannot open a
file of the driver's kept there.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

from harness.control.runstate import start_time
from tests.support.ports import free_ports

SPARK_HOME = Path(pyspark.__file__).resolve().parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
HIDE_THEN_EXEC = 'mount -t tmpfs -o size=1m kchaos-hidden "$0" && exec "$@"'


@dataclass
class SparkCluster:
    url: str
    web_url: str
    directory: Path
    start_seconds: float
    processes: list[subprocess.Popen] = field(default_factory=list)
    started_pids: set[int] = field(default_factory=set)

    def alive_workers(self) -> int:
        with urllib.request.urlopen(f"{self.web_url}/json/", timeout=2) as answer:
            return int(json.load(answer)["aliveworkers"])

    def remember_descendants(self) -> None:
        """Note every process the cluster runs now (executors, Python workers)."""
        self.started_pids |= _descendants({p.pid for p in self.processes})


def environment(directory: Path) -> dict[str, str]:
    """Spark's variables for a cluster and its drivers: no user configuration, loopback,
    this Python on the executors, small daemons."""
    conf = directory / "conf"
    conf.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "SPARK_HOME": str(SPARK_HOME), "SPARK_CONF_DIR": str(conf),
            "SPARK_LOCAL_IP": "127.0.0.1", "PYSPARK_PYTHON": sys.executable,
            "SPARK_DAEMON_MEMORY": "256m", "SPARK_LOG_DIR": str(directory)}


@contextmanager
def spark_cluster(directory: Path, *, workers: int = 2, hide: Path | None = None,
                  timeout: float = 90.0) -> Iterator[SparkCluster]:
    """A master and `workers` one-core, 1 GiB workers on 127.0.0.1, logs under `directory`."""
    started = time.monotonic()
    port, web, *worker_webs = free_ports(2 + workers)
    env = environment(directory)
    cluster = SparkCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{web}", directory,
                           0.0)
    try:
        cluster.processes.append(_spawn(
            [str(SPARK_CLASS), MASTER, "--host", "127.0.0.1", "--port", str(port),
             "--webui-port", str(web)], directory / "master.log", env))
        for number, worker_web in enumerate(worker_webs):
            work = directory / f"worker-{number}"
            work.mkdir(parents=True, exist_ok=True)
            argv = [str(SPARK_CLASS), WORKER, cluster.url, "--host", "127.0.0.1", "--cores", "1",
                    "--memory", "1g", "--webui-port", str(worker_web), "--work-dir", str(work)]
            if hide is not None:
                argv = ["unshare", "--mount", "--propagation", "private", "--",
                        "sh", "-c", HIDE_THEN_EXEC, str(hide), *argv]
            cluster.processes.append(_spawn(argv, directory / f"worker-{number}.log", env))
        _wait_for_workers(cluster, workers, started + timeout)
        cluster.start_seconds = time.monotonic() - started
        yield cluster
    finally:
        _stop(cluster)


def leftovers(cluster: SparkCluster) -> list[str]:
    """`ps` lines of processes the cluster started that still run."""
    table = subprocess.run(["ps", "-eo", "pid=,stat=,args="], capture_output=True, text=True,
                           check=True).stdout.splitlines()
    marks = (cluster.url, str(cluster.directory / "conf"))
    found = []
    for line in table:
        pid, stat, args = (line.split(None, 2) + ["", ""])[:3]
        if stat.startswith("Z"):
            continue
        if int(pid) in cluster.started_pids or any(mark in args for mark in marks):
            found.append(line.strip())
    return found


def _spawn(argv: list[str], log: Path, env: dict[str, str]) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)


def _wait_for_workers(cluster: SparkCluster, workers: int, deadline: float) -> None:
    while time.monotonic() < deadline:
        for process in cluster.processes:
            if process.poll() is not None:
                raise RuntimeError(f"{process.args[:3]} exited with {process.returncode}; "
                                   f"see the logs in {cluster.directory}")
        try:
            if cluster.alive_workers() == workers:
                return
        except OSError:
            pass
        time.sleep(0.2)
    raise RuntimeError(f"{workers} workers did not register with {cluster.url} in time; "
                       f"see the logs in {cluster.directory}")


def _stop(cluster: SparkCluster) -> None:
    """Terminate each process group, then kill by PID whatever the cluster started that
    still runs (a pyspark daemon leads a group of its own)."""
    cluster.remember_descendants()
    for process in cluster.processes:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
    deadline = time.monotonic() + 15
    for process in cluster.processes:
        try:
            process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
    for pid in cluster.started_pids:
        if start_time(pid) is not None:
            os.kill(pid, signal.SIGKILL)


def _descendants(roots: set[int]) -> set[int]:
    table = subprocess.run(["ps", "-eo", "pid=,ppid="], capture_output=True, text=True,
                           check=True).stdout.split()
    children: dict[int, list[int]] = {}
    for pid, parent in zip(table[::2], table[1::2], strict=True):
        children.setdefault(int(parent), []).append(int(pid))
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return found
