"""Apache Kafka in KRaft mode: the metadata quorum replaces ZooKeeper.

Each node runs `process.roles` "broker,controller" (a combined node, the default: every
broker node is a voter), or, beside dedicated controllers ("controller"), "broker". The
voters are static (`controller.quorum.voters`, the same on every node); each node's
storage is formatted with the run's one cluster id by Kafka's own
`kafka.tools.StorageTool format` before its first start. The quorum's state is read from
the `quorum-state` file Kafka's Raft client keeps beside the metadata log: the leader (the
active controller) and its epoch.
"""

from __future__ import annotations

import base64
import json
import shlex
import uuid
from collections.abc import Mapping, Sequence

from harness.db.brokers import CLIENT_PORT, CONTROL_PORT, QuorumState, chaos_defaults

__all__ = ["BROKER", "COMBINED", "CONTROLLER", "METADATA_SEGMENT", "QUORUM_STATE",
           "kraft_properties", "new_cluster_id", "parse_quorum_state", "start_command",
           "voters_text"]

BROKER = "broker"
COMBINED = "broker,controller"
CONTROLLER = "controller"
# Relative to the node's directory: the metadata log lives in the first (only) log dir.
QUORUM_STATE = "data/__cluster_metadata-0/quorum-state"
# The metadata log's first segment (a run's metadata stays far below its 1 GiB roll).
METADATA_SEGMENT = "data/__cluster_metadata-0/00000000000000000000.log"
META_PROPERTIES = "data/meta.properties"
# ZooKeeper-mode properties a KRaft node must not be given (broker.id becomes node.id).
ZOOKEEPER_ONLY = ("broker.id", "zookeeper.connect", "zookeeper.session.timeout.ms")


def new_cluster_id() -> str:
    """A cluster id as Kafka writes one: 16 random bytes, URL-safe base64 without padding,
    never starting with "-" (Kafka's command-line tools would read it as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def voters_text(voters: Mapping[int, str]) -> str:
    """`controller.quorum.voters`: `id@address:port`, comma separated, by node id."""
    return ",".join(f"{node_id}@{address}:{CONTROL_PORT}"
                    for node_id, address in sorted(voters.items()))


def kraft_properties(node_id: int, roles: str, address: str, voters: str, log_dir: str,
                     cluster_size: int, overrides: Mapping[str, str]) -> dict[str, str]:
    """A KRaft node's properties before the version's sizing: the chaos defaults without
    their ZooKeeper ones, its roles and listeners, the voters, then `overrides`."""
    properties = {key: value
                  for key, value in chaos_defaults(node_id, "", log_dir, cluster_size).items()
                  if key not in ZOOKEEPER_ONLY}
    listeners = [f"CONTROLLER://{address}:{CONTROL_PORT}"] if "controller" in roles else []
    if "broker" in roles:
        listeners.insert(0, f"PLAINTEXT://{address}:{CLIENT_PORT}")
        properties["advertised.listeners"] = f"PLAINTEXT://{address}:{CLIENT_PORT}"
        properties["inter.broker.listener.name"] = "PLAINTEXT"
    properties.update({
        "process.roles": roles,
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "listeners": ",".join(listeners),
    })
    properties.update(overrides)
    return properties


def start_command(java_options: Sequence[str], libs: str, directory: str,
                  cluster_id: str) -> list[str]:
    """`sh -c`: format the node's storage with `cluster_id` by Kafka's StorageTool unless
    it is formatted (a restart), then become the Kafka process (`exec`, so the recorded
    pid is Kafka's)."""
    java = " ".join(shlex.quote(part) for part in [*java_options, "-cp", f"{libs}/*"])
    config = shlex.quote(f"{directory}/server.properties")
    meta = shlex.quote(f"{directory}/{META_PROPERTIES}")
    script = (f"test -f {meta} || {java} kafka.tools.StorageTool format "
              f"--cluster-id {shlex.quote(cluster_id)} --config {config} || exit 1; "
              f"exec {java} kafka.Kafka {config}")
    return ["sh", "-c", script]


def parse_quorum_state(text: str) -> QuorumState | None:
    """The leader and epoch of a `quorum-state` file's JSON (`leaderId`, `leaderEpoch`);
    None when it is not one."""
    try:
        data = json.loads(text)
        return QuorumState(int(data["leaderId"]), int(data["leaderEpoch"]))
    except (ValueError, KeyError, TypeError):
        return None
