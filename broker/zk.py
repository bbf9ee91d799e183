"""The ZooKeeper layout of Kafka's ZooKeeper era, read and written with kazoo.

Paths and JSON bodies are Kafka's (seeds/000 "Controller", seeds/002 "zk存储的kafka信息"):

    /brokers/ids/<id>                               ephemeral broker registration
    /brokers/topics/<t>                             replica assignment
    /brokers/topics/<t>/partitions/<p>/state        leader, leader epoch, ISR (CAS on znode version)
    /controller                                     ephemeral, the active controller
    /controller_epoch                               persistent int, bumped by every new controller
    /isr_change_notification/isr_change_<seq>       leaders tell the controller the ISR moved
    /admin/reassign_partitions, /admin/preferred_replica_election, /admin/delete_topics/<t>
    /config/topics/<t>                              per-topic overrides

Every function is synchronous and takes a started `KazooClient`; asyncio callers run them
through `loop.run_in_executor`. Writes made by the controller are fenced: they run in a
multi-op transaction that first checks the version of `/controller_epoch`.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError, RolledBackError

__all__ = [
    "BROKER_IDS", "BROKER_TOPICS", "CONTROLLER", "CONTROLLER_EPOCH", "ISR_CHANGE_NOTIFICATION",
    "REASSIGN_PARTITIONS", "PREFERRED_REPLICA_ELECTION", "DELETE_TOPICS", "CONFIG_TOPICS",
    "BrokerRegistration", "LeaderIsr", "ZkError", "BrokerIdInUseError", "TopicExistsError",
    "ControllerMovedError", "register_broker", "read_brokers", "read_broker_epochs",
    "create_topic", "read_topics", "read_topic_assignment", "write_topic_assignment",
    "read_partition_state", "update_partition_state", "write_partition_state_fenced",
    "notify_isr_change", "read_isr_change_notifications", "read_topic_config",
    "read_controller", "register_controller", "read_controller_epoch",
    "read_reassignment", "write_reassignment", "read_preferred_election", "ensure_paths",
    "partition_state_path",
]

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONTROLLER = "/controller"
CONTROLLER_EPOCH = "/controller_epoch"
ISR_CHANGE_NOTIFICATION = "/isr_change_notification"
REASSIGN_PARTITIONS = "/admin/reassign_partitions"
PREFERRED_REPLICA_ELECTION = "/admin/preferred_replica_election"
DELETE_TOPICS = "/admin/delete_topics"
CONFIG_TOPICS = "/config/topics"
ISR_CHANGE_PREFIX = "isr_change_"

NO_LEADER = -1


class ZkError(Exception):
    """Base of the errors this module raises (kazoo's own errors pass through)."""


class BrokerIdInUseError(ZkError):
    """Another live broker holds /brokers/ids/<id>."""


class TopicExistsError(ZkError):
    """/brokers/topics/<t> already exists."""


class ControllerMovedError(ZkError):
    """A fenced write failed: /controller_epoch changed, another controller was elected."""


@dataclass(frozen=True)
class BrokerRegistration:
    broker_id: int
    host: str
    port: int
    control_host: str
    control_port: int
    rack: str | None = None


@dataclass(frozen=True)
class LeaderIsr:
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int


def _now_ms() -> str:
    return str(int(time.time() * 1000))


def _dumps(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def partition_state_path(topic: str, partition: int) -> str:
    return f"{BROKER_TOPICS}/{topic}/partitions/{partition}/state"


def ensure_paths(zk: KazooClient) -> None:
    """Create the persistent parents every broker and the controller watch (idempotent)."""
    for path in (BROKER_IDS, BROKER_TOPICS, ISR_CHANGE_NOTIFICATION, DELETE_TOPICS,
                 CONFIG_TOPICS, "/admin"):
        zk.ensure_path(path)


# -- brokers -------------------------------------------------------------------------------

def register_broker(zk: KazooClient, reg: BrokerRegistration) -> int:
    """Create the ephemeral /brokers/ids/<id>; returns the broker epoch (the znode's czxid)."""
    body = {
        "version": 5, "host": reg.host, "port": reg.port,
        "endpoints": [f"PLAINTEXT://{reg.host}:{reg.port}",
                      f"CONTROLLER://{reg.control_host}:{reg.control_port}"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT", "CONTROLLER": "PLAINTEXT"},
        "rack": reg.rack, "timestamp": _now_ms(), "jmx_port": -1,
    }
    zk.ensure_path(BROKER_IDS)
    try:
        _, stat = zk.create(f"{BROKER_IDS}/{reg.broker_id}", _dumps(body), ephemeral=True,
                            include_data=True)
    except NodeExistsError:
        raise BrokerIdInUseError(
            f"broker.id {reg.broker_id} is already registered at {BROKER_IDS}/{reg.broker_id}"
        ) from None
    return stat.czxid


def _parse_endpoint(endpoint: str) -> tuple[str, str, int]:
    listener, _, address = endpoint.partition("://")
    host, _, port = address.rpartition(":")
    return listener, host, int(port)


def _parse_registration(broker_id: int, data: bytes) -> BrokerRegistration:
    body = json.loads(data)
    host, port = body.get("host"), body.get("port")
    control_host, control_port = host, port
    for endpoint in body.get("endpoints", []):
        listener, ep_host, ep_port = _parse_endpoint(endpoint)
        if listener == "CONTROLLER":
            control_host, control_port = ep_host, ep_port
        elif host is None or port in (None, -1):
            host, port = ep_host, ep_port
    return BrokerRegistration(broker_id, host, port, control_host, control_port, body.get("rack"))


def read_brokers(zk: KazooClient) -> dict[int, BrokerRegistration]:
    return {broker_id: reg for broker_id, (reg, _) in _read_brokers_with_epochs(zk).items()}


def read_broker_epochs(zk: KazooClient) -> dict[int, tuple[BrokerRegistration, int]]:
    """Live brokers with their epoch (czxid of the registration znode)."""
    return _read_brokers_with_epochs(zk)


def _read_brokers_with_epochs(zk: KazooClient) -> dict[int, tuple[BrokerRegistration, int]]:
    brokers = {}
    try:
        children = zk.get_children(BROKER_IDS)
    except NoNodeError:
        return {}
    for child in children:
        try:
            data, stat = zk.get(f"{BROKER_IDS}/{child}")
        except NoNodeError:
            continue
        broker_id = int(child)
        brokers[broker_id] = (_parse_registration(broker_id, data), stat.czxid)
    return brokers


# -- topics --------------------------------------------------------------------------------

def _assignment_body(assignment: dict[int, list[int]], adding: dict | None = None,
                     removing: dict | None = None) -> bytes:
    return _dumps({
        "version": 2,
        "partitions": {str(p): list(r) for p, r in sorted(assignment.items())},
        "adding_replicas": {str(p): list(r) for p, r in (adding or {}).items()},
        "removing_replicas": {str(p): list(r) for p, r in (removing or {}).items()},
    })


def create_topic(zk: KazooClient, topic: str, assignment: dict[int, list[int]],
                 config: dict[str, str] | None) -> None:
    """Write the topic config then its assignment (as Kafka); the controller does the rest."""
    zk.ensure_path(BROKER_TOPICS)
    zk.ensure_path(CONFIG_TOPICS)
    if zk.exists(f"{BROKER_TOPICS}/{topic}"):
        raise TopicExistsError(f"topic {topic!r} already exists")
    config_path = f"{CONFIG_TOPICS}/{topic}"
    config_body = _dumps({"version": 1, "config": dict(config or {})})
    try:
        zk.create(config_path, config_body)
    except NodeExistsError:
        zk.set(config_path, config_body)
    try:
        zk.create(f"{BROKER_TOPICS}/{topic}", _assignment_body(assignment))
    except NodeExistsError:
        raise TopicExistsError(f"topic {topic!r} already exists") from None


def read_topics(zk: KazooClient) -> list[str]:
    try:
        return sorted(zk.get_children(BROKER_TOPICS))
    except NoNodeError:
        return []


def read_topic_assignment(zk: KazooClient, topic: str) -> dict[int, list[int]] | None:
    try:
        data, _ = zk.get(f"{BROKER_TOPICS}/{topic}")
    except NoNodeError:
        return None
    body = json.loads(data)
    return {int(p): list(r) for p, r in body.get("partitions", {}).items()}


def write_topic_assignment(zk: KazooClient, topic: str, assignment: dict[int, list[int]],
                           epoch_version: int, adding: dict | None = None,
                           removing: dict | None = None) -> None:
    """Fenced overwrite of a topic's assignment (reassignment)."""
    tx = zk.transaction()
    tx.check(CONTROLLER_EPOCH, epoch_version)
    tx.set_data(f"{BROKER_TOPICS}/{topic}", _assignment_body(assignment, adding, removing))
    _commit_fenced(tx)


def add_partitions(zk: KazooClient, topic: str, added: dict[int, list[int]]) -> None:
    """Add partitions to an existing topic's assignment (compare-and-set on the znode
    version, as Kafka's AdminZkClient); the controller creates them when it sees the change.
    Raises NoNodeError if the topic is gone, BadVersionError if it changed meanwhile."""
    data, stat = zk.get(f"{BROKER_TOPICS}/{topic}")
    body = json.loads(data)
    assignment = {int(p): list(r) for p, r in body.get("partitions", {}).items()}
    if set(added) & set(assignment):
        raise ValueError(f"partitions {sorted(set(added) & set(assignment))} already exist")
    assignment.update(added)
    zk.set(f"{BROKER_TOPICS}/{topic}", _assignment_body(assignment), version=stat.version)


def read_topic_config(zk: KazooClient, topic: str) -> dict[str, str]:
    try:
        data, _ = zk.get(f"{CONFIG_TOPICS}/{topic}")
    except NoNodeError:
        return {}
    return {k: str(v) for k, v in json.loads(data).get("config", {}).items()}


# -- partition state -----------------------------------------------------------------------

def _state_body(state: LeaderIsr) -> bytes:
    return _dumps({"controller_epoch": state.controller_epoch, "leader": state.leader,
                   "version": 1, "leader_epoch": state.leader_epoch, "isr": list(state.isr)})


def read_partition_state(zk: KazooClient, topic: str,
                         partition: int) -> tuple[LeaderIsr, int] | None:
    try:
        data, stat = zk.get(partition_state_path(topic, partition))
    except NoNodeError:
        return None
    body = json.loads(data)
    state = LeaderIsr(body["leader"], body["leader_epoch"], tuple(body["isr"]),
                      body["controller_epoch"])
    return state, stat.version


def update_partition_state(zk: KazooClient, topic: str, partition: int, state: LeaderIsr,
                           expected_version: int) -> int | None:
    """Compare-and-set of the state znode (the leader's ISR changes); new version or None."""
    try:
        stat = zk.set(partition_state_path(topic, partition), _state_body(state),
                      version=expected_version)
    except (BadVersionError, NoNodeError):
        return None
    return stat.version


def write_partition_state_fenced(zk: KazooClient, topic: str, partition: int, state: LeaderIsr,
                                 expected_version: int | None, epoch_version: int) -> int | None:
    """The controller's write: create (expected_version None) or CAS-set, fenced by the version
    of /controller_epoch. Returns the new znode version, None on a lost CAS; raises
    ControllerMovedError when the epoch check fails."""
    path = partition_state_path(topic, partition)
    if expected_version is None:
        zk.ensure_path(path.rsplit("/", 1)[0])
    tx = zk.transaction()
    tx.check(CONTROLLER_EPOCH, epoch_version)
    if expected_version is None:
        tx.create(path, _state_body(state))
    else:
        tx.set_data(path, _state_body(state), version=expected_version)
    results = tx.commit()
    if _epoch_check_failed(results):
        raise ControllerMovedError(f"/controller_epoch is no longer at version {epoch_version}")
    if isinstance(results[1], Exception):
        return None
    return 0 if expected_version is None else results[1].version


def _epoch_check_failed(results: list) -> bool:
    """The first op of a fenced transaction is the epoch check; a later failing op makes
    ZooKeeper report it as RolledBackError, which is not a failed check."""
    return isinstance(results[0], Exception) and not isinstance(results[0], RolledBackError)


def _commit_fenced(tx) -> list:
    results = tx.commit()
    if _epoch_check_failed(results):
        raise ControllerMovedError("/controller_epoch moved")
    for result in results[1:]:
        if isinstance(result, Exception) and not isinstance(result, RolledBackError):
            raise result
    return results


# -- ISR change notifications --------------------------------------------------------------

def notify_isr_change(zk: KazooClient, partitions: list[tuple[str, int]]) -> None:
    body = _dumps({"version": 1, "partitions": [{"topic": t, "partition": p}
                                                for t, p in partitions]})
    zk.create(f"{ISR_CHANGE_NOTIFICATION}/{ISR_CHANGE_PREFIX}", body, sequence=True,
              makepath=True)


def read_isr_change_notifications(zk: KazooClient, delete: bool = True) -> set[tuple[str, int]]:
    """All partitions named by pending notifications; the notifications are deleted."""
    partitions: set[tuple[str, int]] = set()
    try:
        children = zk.get_children(ISR_CHANGE_NOTIFICATION)
    except NoNodeError:
        return partitions
    for child in sorted(children):
        path = f"{ISR_CHANGE_NOTIFICATION}/{child}"
        try:
            data, _ = zk.get(path)
        except NoNodeError:
            continue
        for item in json.loads(data).get("partitions", []):
            partitions.add((item["topic"], int(item["partition"])))
        if delete:
            try:
                zk.delete(path)
            except NoNodeError:
                pass
    return partitions


# -- controller election -------------------------------------------------------------------

def read_controller(zk: KazooClient) -> int | None:
    """The broker id in /controller, or None if there is no (valid) controller."""
    try:
        data, _ = zk.get(CONTROLLER)
    except NoNodeError:
        return None
    try:
        broker_id = int(json.loads(data)["brokerid"])
    except (ValueError, KeyError, TypeError):
        return None
    return None if broker_id == NO_LEADER else broker_id


def read_controller_epoch(zk: KazooClient) -> tuple[int, int] | None:
    """(epoch, znode version) of /controller_epoch, None if it does not exist yet."""
    try:
        data, stat = zk.get(CONTROLLER_EPOCH)
    except NoNodeError:
        return None
    return int(data.decode()), stat.version


def register_controller(zk: KazooClient, broker_id: int) -> tuple[int, int] | None:
    """Try to become controller: in one transaction create the ephemeral /controller and bump
    /controller_epoch with a CAS (seeds/000 "Controller"). Returns (epoch, epoch znode version)
    or None if another broker won."""
    while True:
        current = read_controller_epoch(zk)
        if current is None:
            try:
                zk.create(CONTROLLER_EPOCH, b"0")
            except NodeExistsError:
                pass
            continue
        epoch, version = current
        tx = zk.transaction()
        tx.create(CONTROLLER, _dumps({"version": 1, "brokerid": broker_id,
                                      "timestamp": _now_ms()}), ephemeral=True)
        tx.set_data(CONTROLLER_EPOCH, str(epoch + 1).encode(), version=version)
        results = tx.commit()
        if not any(isinstance(r, Exception) for r in results):
            return epoch + 1, results[1].version
        if isinstance(results[0], NodeExistsError):
            return None
        # /controller was free but the epoch moved under us: read again and retry.


# -- admin requests ------------------------------------------------------------------------

def read_reassignment(zk: KazooClient) -> dict[tuple[str, int], list[int]]:
    """Pending /admin/reassign_partitions: partition -> target replicas."""
    try:
        data, _ = zk.get(REASSIGN_PARTITIONS)
    except NoNodeError:
        return {}
    body = json.loads(data)
    return {(item["topic"], int(item["partition"])): list(item["replicas"])
            for item in body.get("partitions", [])}


def write_reassignment(zk: KazooClient, pending: dict[tuple[str, int], list[int]]) -> None:
    """Rewrite /admin/reassign_partitions with what is still pending; delete it when empty."""
    if not pending:
        try:
            zk.delete(REASSIGN_PARTITIONS)
        except NoNodeError:
            pass
        return
    body = _dumps({"version": 1, "partitions": [
        {"topic": t, "partition": p, "replicas": r} for (t, p), r in sorted(pending.items())]})
    try:
        zk.set(REASSIGN_PARTITIONS, body)
    except NoNodeError:
        zk.create(REASSIGN_PARTITIONS, body, makepath=True)


def read_preferred_election(zk: KazooClient, delete: bool = True) -> set[tuple[str, int]]:
    """Partitions named in /admin/preferred_replica_election (the znode is then deleted)."""
    try:
        data, _ = zk.get(PREFERRED_REPLICA_ELECTION)
    except NoNodeError:
        return set()
    if delete:
        try:
            zk.delete(PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            pass
    return {(item["topic"], int(item["partition"]))
            for item in json.loads(data).get("partitions", [])}
