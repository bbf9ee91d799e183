"""Apache Kafka in KRaft mode: the metadata quorum replaces ZooKeeper.

Each node runs `process.roles` "broker,controller" (a combined node, the default: every
broker node is a voter), or, beside dedicated controllers ("controller"), "broker". The
quorum is static (`controller.quorum.voters`, the same on every node, fixed for the
cluster's life) or dynamic (KIP-853, Kafka 3.9 and later: the nodes find the quorum through
`controller.quorum.bootstrap.servers`, the voters' storage is formatted with the initial
voter set, each voter named by node id and metadata directory id, and voters can be added
and removed while it runs). Each node's storage is formatted with the run's one cluster id
by Kafka's own `kafka.tools.StorageTool format` before its first start. The quorum's state
is read from the `quorum-state` file Kafka's Raft client keeps beside the metadata log:
the leader (the active controller) and its epoch.
"""

from __future__ import annotations

import base64
import json
import shlex
import uuid
from collections.abc import Mapping, Sequence

from harness.db.brokers import CLIENT_PORT, CONTROL_PORT, QuorumState, chaos_defaults

__all__ = ["BROKER", "COMBINED", "CONTROLLER", "DYNAMIC", "METADATA_SEGMENT", "QUORUM_KINDS",
           "QUORUM_STATE", "STATIC", "format_options", "kraft_properties", "new_cluster_id",
           "parse_quorum_state", "quorum_properties", "start_command", "voters_text"]

BROKER = "broker"
COMBINED = "broker,controller"
CONTROLLER = "controller"
STATIC = "static"
DYNAMIC = "dynamic"
QUORUM_KINDS = (STATIC, DYNAMIC)
# Relative to the node's directory: the metadata log lives in the first (only) log dir.
QUORUM_STATE = "data/__cluster_metadata-0/quorum-state"
# The metadata log's first segment (a run's metadata stays far below its 1 GiB roll).
METADATA_SEGMENT = "data/__cluster_metadata-0/00000000000000000000.log"
META_PROPERTIES = "data/meta.properties"
# ZooKeeper-mode properties a KRaft node must not be given (broker.id becomes node.id).
ZOOKEEPER_ONLY = ("broker.id", "zookeeper.connect", "zookeeper.session.timeout.ms")


def new_cluster_id() -> str:
    """A cluster id (or a directory id) as Kafka writes one: 16 random bytes, URL-safe
    base64 without padding, never starting with "-" (Kafka's command-line tools would read
    it as an option)."""
    while True:
        text = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not text.startswith("-"):
            return text


def voters_text(voters: Mapping[int, str], kind: str = STATIC) -> str:
    """The voters by node id, comma separated: `id@address:port` for a static quorum
    (`controller.quorum.voters`), `id@address:port:directory-id` with a new directory id
    each for a dynamic one (StorageTool's `--initial-controllers`)."""
    return ",".join(f"{node_id}@{address}:{CONTROL_PORT}"
                    + (f":{new_cluster_id()}" if kind == DYNAMIC else "")
                    for node_id, address in sorted(voters.items()))


def quorum_properties(kind: str, voters: str) -> dict[str, str]:
    """How a node finds the quorum of `voters_text(..., kind)`: the static voters, or the
    dynamic quorum's bootstrap servers (each voter's address and port)."""
    if kind == STATIC:
        return {"controller.quorum.voters": voters}
    endpoints = [voter.split("@", 1)[1].rsplit(":", 1)[0] for voter in voters.split(",")]
    return {"controller.quorum.bootstrap.servers": ",".join(endpoints)}


def format_options(kind: str, roles: str, voters: str) -> list[str]:
    """StorageTool format's options beyond the cluster id: a voter of a dynamic quorum is
    formatted with the initial voter set (the same on every voter)."""
    if kind == DYNAMIC and CONTROLLER in roles.split(","):
        return ["--initial-controllers", voters]
    return []


def kraft_properties(node_id: int, roles: str, address: str, quorum: Mapping[str, str],
                     log_dir: str, cluster_size: int,
                     overrides: Mapping[str, str]) -> dict[str, str]:
    """A KRaft node's properties before the version's sizing: the chaos defaults without
    their ZooKeeper ones, its roles and listeners, how it finds the quorum
    (`quorum_properties`), then `overrides`."""
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
        **quorum,
        "controller.listener.names": "CONTROLLER",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "listeners": ",".join(listeners),
    })
    properties.update(overrides)
    return properties


def start_command(java_options: Sequence[str], libs: str, directory: str,
                  cluster_id: str, formatting: Sequence[str] = ()) -> list[str]:
    """`sh -c`: format the node's storage with `cluster_id` (and `formatting`, from
    `format_options`) by Kafka's StorageTool unless it is formatted (a restart), then
    become the Kafka process (`exec`, so the recorded pid is Kafka's)."""
    java = " ".join(shlex.quote(part) for part in [*java_options, "-cp", f"{libs}/*"])
    config = shlex.quote(f"{directory}/server.properties")
    meta = shlex.quote(f"{directory}/{META_PROPERTIES}")
    extra = "".join(f" {shlex.quote(option)}" for option in formatting)
    script = (f"test -f {meta} || {java} kafka.tools.StorageTool format "
              f"--cluster-id {shlex.quote(cluster_id)} --config {config}{extra} || exit 1; "
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
