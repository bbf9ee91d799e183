"""kcat's balanced consumer (`kcat -G`), its output translated into the JSON events.

kcat prints each record as `partition offset value` (`-f '%p %o %s\\n'`, unbuffered `-u`)
on stdout and each rebalance as `% Group G rebalanced (memberid M): assigned: T [0], T [1]`
(or `revoked: ...`) on stderr; this wrapper reads both and writes the same JSON lines as
the other clients. Unlike them, kcat commits with librdkafka's auto-commit
(enable.auto.commit=true, every auto.commit.interval.ms, and on revocation), so its
offsets lag its output by up to that interval and it writes no `committed` events: the
group's committed offsets are read from the brokers instead. Other stderr lines are
passed through to this process's stderr. SIGTERM is forwarded to kcat (it leaves the
group and exits); SIGKILL of the process group kills both.

`python -m tests.support.group_clients.kcat_client BOOTSTRAP GROUP TOPIC`
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
from typing import IO

from tests.support.group_clients.emit import (
    HEARTBEAT_INTERVAL_MS,
    METADATA_MAX_AGE_MS,
    SESSION_TIMEOUT_MS,
    arguments,
    emit,
    warn,
)

AUTO_COMMIT_INTERVAL_MS = 500
REBALANCE = re.compile(r"^% Group .* rebalanced \(memberid .*\): (assigned|revoked): (.*)$")
PARTITION = re.compile(r"\[(\d+)\]")


def command(bootstrap: str, group: str, topic: str) -> list[str]:
    settings = {
        "session.timeout.ms": SESSION_TIMEOUT_MS,
        "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
        "auto.offset.reset": "earliest",
        "metadata.max.age.ms": METADATA_MAX_AGE_MS,
        "topic.metadata.refresh.interval.ms": METADATA_MAX_AGE_MS,
        "enable.auto.commit": "true",
        "auto.commit.interval.ms": AUTO_COMMIT_INTERVAL_MS,
    }
    options = [item for key, value in settings.items() for item in ("-X", f"{key}={value}")]
    return ["kcat", "-C", "-u", "-b", bootstrap, "-G", group, *options,
            "-f", "%p %o %s\\n", topic]


def translate_records(stream: IO[str]) -> None:
    for line in stream:
        partition, offset, value = (line.rstrip("\n").split(" ", 2) + [""])[:3]
        emit("record", partition=int(partition), offset=int(offset), value=value)


def translate_rebalances(stream: IO[str]) -> None:
    for line in stream:
        match = REBALANCE.match(line.rstrip("\n"))
        if match is None:
            warn(line.rstrip("\n"))
            continue
        partitions = sorted(int(p) for p in PARTITION.findall(match.group(2)))
        emit(match.group(1), partitions=partitions)


def main(argv: list[str]) -> int:
    kcat = subprocess.Popen(command(*arguments(argv)), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, bufsize=1)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: kcat.send_signal(signal.SIGTERM))
    readers = [threading.Thread(target=translate_records, args=(kcat.stdout,)),
               threading.Thread(target=translate_rebalances, args=(kcat.stderr,))]
    for reader in readers:
        reader.start()
    code = kcat.wait()
    for reader in readers:
        reader.join()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
