"""A KRaft cluster's metadata log, read as the controller event log.

In KRaft mode the controllers' decisions are records of the `__cluster_metadata` log.
Kafka's own log dump tool decodes them (`kafka.tools.DumpLogSegments
--cluster-metadata-decoder`: a batch line, `baseOffset: ... partitionLeaderEpoch: E ...
CreateTime: T ...`, then one `| offset: ...` line per record, with `payload: {"type":
..., "data": {...}}` or, for the quorum's control records, `LeaderChange: {...}`), and
`metadata_events` replays that text into the events our broker writes
(`checker.cluster.event_log`), the same names and fields as the ZooKeeper-mode logs
(`harness.db.kafka.logs`):

- become-controller: a LeaderChange record: `leaderId` leads the quorum from epoch E on
  (the batch's partitionLeaderEpoch). Every record of epoch E was appended by that
  leader, the active controller: its `controller_id` and `controller_epoch`. Kafka 3.x's
  decoder prints no `leaderId` (`controlType: LEADER_CHANGE(2)`): the leader of an epoch
  is then the node whose server.log says `[QuorumController id=N] Becoming the active
  controller at epoch E`.
- new-partition: a PARTITION_RECORD (old leader -1), its topic named by the TOPIC_RECORD
  of its topic id.
- elect-leader, leader-offline, bump-leader-epoch: a PARTITION_CHANGE_RECORD with a
  `leader` (a record without one leaves leader and leader epoch as they were; with one
  the leader epoch goes up by one): -1 is leader-offline, the same leader a bump. An
  election is unclean when it sets `leaderRecoveryState` 1 (RECOVERING: the leader came
  from outside the ISR); `elr` when the new leader was not in the ISR but in the
  eligible leader replicas (KIP-966). The selector is "controlled-shutdown" when the old
  leader was shutting down, "offline" when it was fenced (by the same batch, as Kafka
  writes a broker's fencing with the elections it causes) or there was none,
  "preferred" when the new leader is the first replica, else "online".
- isr-change: a PARTITION_CHANGE_RECORD that changes only the ISR (or the ELR).
- broker-change: a broker unfenced (`new`), fenced (`dead`, BROKER_REGISTRATION_CHANGE
  `fenced` 1 or FENCE_BROKER_RECORD) or registered again while it was live (`bounced`);
  controlled-shutdown: a broker's `inControlledShutdown` set.

A KRaft node's copy of the log holds every controller's records; `metadata_events` keeps
those of the epochs `node_id` led, so the nodes' event logs, merged, hold each decision
once, as ZooKeeper-mode ones do.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Collection
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = ["DECODER", "MetadataLogError", "dump_metadata_log", "led_epochs", "metadata_events",
           "node_id_of", "write_metadata_event_log"]

DECODER = "kafka.tools.DumpLogSegments"
DUMP_SECONDS = 120.0
NO_LEADER = -1
RECOVERING = 1

_BATCH = re.compile(r"^baseOffset: \d+ .*?partitionLeaderEpoch: (?P<epoch>-?\d+) ")
_RECORD = re.compile(r"^\| offset: (?P<offset>\d+) CreateTime: (?P<time>-?\d+) .*? "
                     r"(?:(?P<kind>payload|LeaderChange): (?P<body>\{.*\})"
                     r"|controlType: (?P<control>LEADER_CHANGE)\(\d+\))$")
_BECOMING_ACTIVE = re.compile(r"\[QuorumController id=(?P<id>\d+)\] Becoming the active "
                              r"controller at epoch (?P<epoch>\d+)")


class MetadataLogError(RuntimeError):
    """Kafka's decoder could not read a metadata log: the message says which and why."""


@dataclass
class _Partition:
    leader: int
    epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    elr: tuple[int, ...] = ()


@dataclass
class _Replay:
    node_id: int | None
    topics: dict[str, str] = field(default_factory=dict)
    partitions: dict[tuple[str, int], _Partition] = field(default_factory=dict)
    fenced: set[int] = field(default_factory=set)
    shutting_down: set[int] = field(default_factory=set)
    leaders: dict[int, int] = field(default_factory=dict)
    events: list[dict[str, Any]] = field(default_factory=list)

    def batch(self, epoch: int, records: list[tuple[int, str, dict[str, Any]]]) -> None:
        fenced_here = {data["brokerId"] for _, kind, data in _payloads(records)
                       if kind == "FENCE_BROKER_RECORD" or (
                           kind == "BROKER_REGISTRATION_CHANGE_RECORD"
                           and data.get("fenced") == 1)}
        for time, kind, body in records:
            if kind == "LeaderChange":
                if "leaderId" in body:
                    self.leaders[epoch] = body["leaderId"]
                if epoch in self.leaders:
                    self._emit(time, epoch, "become-controller")
                continue
            record_type, data = body.get("type"), body.get("data") or {}
            if record_type == "TOPIC_RECORD":
                self.topics[data["topicId"]] = data["name"]
            elif record_type == "PARTITION_RECORD":
                self._new_partition(time, epoch, data)
            elif record_type == "PARTITION_CHANGE_RECORD":
                self._partition_change(time, epoch, data, fenced_here)
            elif record_type in ("BROKER_REGISTRATION_CHANGE_RECORD", "FENCE_BROKER_RECORD",
                                 "UNFENCE_BROKER_RECORD", "REGISTER_BROKER_RECORD"):
                self._broker(time, epoch, record_type, data)

    def _emit(self, time: int, epoch: int, event: str, **fields: Any) -> None:
        controller = self.leaders.get(epoch)
        if self.node_id is not None and controller != self.node_id:
            return
        self.events.append({"time": time, "controller_id": controller,
                            "controller_epoch": epoch, "event": event, **fields})

    def _new_partition(self, time: int, epoch: int, data: dict[str, Any]) -> None:
        topic = self.topics.get(data["topicId"], data["topicId"])
        state = _Partition(data["leader"], data["leaderEpoch"], tuple(data["isr"]),
                           tuple(data["replicas"]), tuple(data.get("eligibleLeaderReplicas")
                                                          or ()))
        self.partitions[(topic, data["partitionId"])] = state
        self._emit(time, epoch, "new-partition", topic=topic, partition=data["partitionId"],
                   old_leader=NO_LEADER, new_leader=state.leader, leader_epoch=state.epoch,
                   isr=list(state.isr))

    def _partition_change(self, time: int, epoch: int, data: dict[str, Any],
                          fenced_here: set[int]) -> None:
        topic = self.topics.get(data["topicId"], data["topicId"])
        key = (topic, data["partitionId"])
        state = self.partitions.get(key)
        if state is None:
            return
        before = replace(state)
        if "isr" in data:
            state.isr = tuple(data["isr"])
        if "eligibleLeaderReplicas" in data:
            state.elr = tuple(data["eligibleLeaderReplicas"])
        if "replicas" in data:
            state.replicas = tuple(data["replicas"])
        where = {"topic": topic, "partition": key[1]}
        if "leader" not in data:
            if state.isr != before.isr or state.elr != before.elr:
                self._emit(time, epoch, "isr-change", **where, leader=state.leader,
                           leader_epoch=state.epoch, isr=list(state.isr),
                           elr=list(state.elr))
            return
        state.leader, state.epoch = data["leader"], before.epoch + 1
        change = {**where, "old_leader": before.leader, "new_leader": state.leader,
                  "leader_epoch": state.epoch, "isr": list(state.isr)}
        if state.leader == NO_LEADER:
            self._emit(time, epoch, "leader-offline", **change, elr=list(state.elr))
        elif state.leader == before.leader:
            self._emit(time, epoch, "bump-leader-epoch", **change)
        else:
            self._emit(time, epoch, "elect-leader", **change,
                       selector=self._selector(before, state.leader, fenced_here),
                       unclean=data.get("leaderRecoveryState") == RECOVERING,
                       elr=state.leader not in before.isr and state.leader in before.elr)

    def _selector(self, before: _Partition, leader: int, fenced_here: set[int]) -> str:
        if before.leader in self.shutting_down:
            return "controlled-shutdown"
        if before.leader == NO_LEADER or before.leader in self.fenced | fenced_here:
            return "offline"
        if before.replicas and leader == before.replicas[0]:
            return "preferred"
        return "online"

    def _broker(self, time: int, epoch: int, record_type: str, data: dict[str, Any]) -> None:
        broker = data["brokerId"]
        if record_type == "REGISTER_BROKER_RECORD":
            if broker not in self.fenced and any(broker in p.replicas
                                                 for p in self.partitions.values()):
                self._emit(time, epoch, "broker-change", new=[], dead=[], bounced=[broker])
            self.fenced.add(broker)
            self.shutting_down.discard(broker)
            return
        if data.get("inControlledShutdown") == 1 and broker not in self.shutting_down:
            self.shutting_down.add(broker)
            self._emit(time, epoch, "controlled-shutdown", broker_id=broker)
        fence = record_type == "FENCE_BROKER_RECORD" or data.get("fenced") == 1
        unfence = record_type == "UNFENCE_BROKER_RECORD" or data.get("fenced") == -1
        if fence and broker not in self.fenced:
            self.fenced.add(broker)
            self._emit(time, epoch, "broker-change", new=[], dead=[broker], bounced=[])
        elif unfence and broker in self.fenced:
            self.fenced.discard(broker)
            self.shutting_down.discard(broker)
            self._emit(time, epoch, "broker-change", new=[broker], dead=[], bounced=[])


def _payloads(records: list[tuple[int, str, dict[str, Any]]]
              ) -> list[tuple[int, str, dict[str, Any]]]:
    return [(time, body.get("type", ""), body.get("data") or {})
            for time, kind, body in records if kind == "payload"]


def metadata_events(dump: str, node_id: int | None = None,
                    led: Collection[int] = ()) -> list[dict[str, Any]]:
    """The controller events of a metadata log as Kafka's decoder prints it (module
    docstring), in log order; only those of the epochs `node_id` led, unless it is None.
    The quorum's LeaderChange records name each epoch's leader (4.x prints them; 3.x
    prints only their type): `led` adds the epochs `node_id` is known to have led. A
    record line that is not JSON raises ValueError naming its offset."""
    replay = _Replay(node_id)
    if node_id is not None:
        replay.leaders.update(dict.fromkeys(led, node_id))
    epoch: int | None = None
    records: list[tuple[int, str, dict[str, Any]]] = []
    for line in dump.splitlines():
        batch = _BATCH.match(line)
        if batch is not None:
            if epoch is not None:
                replay.batch(epoch, records)
            epoch, records = int(batch["epoch"]), []
            continue
        record = _RECORD.match(line)
        if record is None or epoch is None:
            continue
        if record["control"] is not None:
            records.append((int(record["time"]), "LeaderChange", {}))
            continue
        try:
            body = json.loads(record["body"])
        except ValueError:
            raise ValueError(f"metadata log record at offset {record['offset']} is not "
                             f"JSON: {record['body'][:200]}") from None
        records.append((int(record["time"]), record["kind"], body))
    if epoch is not None:
        replay.batch(epoch, records)
    return replay.events


def dump_metadata_log(segment: Path, libs: str, java: str = "java") -> str:
    """Kafka's decoding of a metadata log segment (the jars of `libs`, on this machine)."""
    try:
        done = subprocess.run([java, "-cp", f"{libs}/*", DECODER, "--cluster-metadata-decoder",
                               "--files", str(segment)], capture_output=True, text=True,
                              timeout=DUMP_SECONDS, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise MetadataLogError(f"{segment}: Kafka's {DECODER} did not run: {error}") from None
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise MetadataLogError(f"{segment}: Kafka's {DECODER} failed (exit "
                               f"{done.returncode}): {last}")
    return done.stdout


def node_id_of(properties: Path) -> int | None:
    """The `node.id` of a KRaft node's server.properties; None when it has none."""
    if not properties.is_file():
        return None
    for line in properties.read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "node.id" and value.strip().isdigit():
            return int(value.strip())
    return None


def led_epochs(server_log: str, node_id: int) -> set[int]:
    """The epochs in which the node became the active controller, as its server.log says
    (`[QuorumController id=1] Becoming the active controller at epoch 3`)."""
    return {int(found["epoch"]) for found in _BECOMING_ACTIVE.finditer(server_log)
            if int(found["id"]) == node_id}


def write_metadata_event_log(node_dir: Path, segment: Path, libs: str,
                             java: str = "java") -> Path:
    """`<node_dir>/controller-events.jsonl` from the node's copy of the metadata log:
    the decisions of the epochs it led (its `node.id` from its server.properties, the
    epochs from the log's LeaderChange records and its server.log)."""
    node_id = node_id_of(node_dir / "server.properties")
    server_log = node_dir / "server.log"
    led = (led_epochs(server_log.read_text(encoding="utf-8", errors="replace"), node_id)
           if node_id is not None and server_log.is_file() else set())
    events = metadata_events(dump_metadata_log(segment, libs, java), node_id, led)
    target = node_dir / "controller-events.jsonl"
    target.write_text("".join(json.dumps(event) + "\n" for event in events),
                      encoding="utf-8")
    return target
