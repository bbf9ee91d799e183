"""A single-node ZooKeeper on loopback for tests, from Debian's zookeeper package."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from harness.db.zookeeper import CLASSPATH, MAIN_CLASS, four_letter_word
from tests.support.ports import free_port


@dataclass
class ZooKeeperProcess:
    process: subprocess.Popen
    port: int
    directory: Path

    @property
    def connect(self) -> str:
        return f"127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)


def start_zookeeper(directory: Path, port: int | None = None,
                    timeout: float = 30.0) -> ZooKeeperProcess:
    """Start a standalone ZooKeeper with data and log under `directory`; wait until it answers."""
    port = port or free_port()
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data").mkdir(exist_ok=True)
    config = directory / "zoo.cfg"
    config.write_text(
        f"tickTime=500\ninitLimit=10\nsyncLimit=5\ndataDir={directory / 'data'}\n"
        f"clientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n"
        "4lw.commands.whitelist=ruok,srvr,stat,mntr\nmaxSessionTimeout=60000\nminSessionTimeout=1000\n"
    )
    log = open(directory / "zookeeper.log", "wb")
    env = dict(os.environ, ZOO_LOG_DIR=str(directory), ZOO_LOG4J_PROP="INFO,CONSOLE")
    process = subprocess.Popen(
        ["java", "-Xmx256m", "-cp", CLASSPATH,
         "-Dzookeeper.log.dir=" + str(directory), "-Dzookeeper.root.logger=INFO,CONSOLE",
         MAIN_CLASS, str(config)],
        stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
    )
    log.close()
    zookeeper = ZooKeeperProcess(process, port, directory)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(
                f"ZooKeeper exited with {process.returncode}; see {directory}/zookeeper.log")
        try:
            if four_letter_word("127.0.0.1", "ruok", port=port) == "imok":
                return zookeeper
        except OSError:
            pass
        time.sleep(0.1)
    zookeeper.stop()
    raise RuntimeError(f"ZooKeeper did not answer on port {port} within {timeout} s")
