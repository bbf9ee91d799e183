"""Kafka's controller.log and state-change.log, read as the controller event log.

A Kafka broker (ZooKeeper mode) logs its controller's decisions in two files, laid
out by `broker.LOG4J_PROPERTIES` (`[2026-11-24T00:27:13.131+0000] INFO msg (logger)`)
with `kafka.controller` and `state.change.logger` at TRACE, as Kafka's own
config/log4j.properties has them (before 2.x partition state changes are TRACE
lines). `controller_events` replays both files merged by time (controller.log first
on a tie: its lines announce what the state-change lines carry out) into the events
our broker writes (`broker/controller/event_log.py`), same fields, same meaning.
Kafka's wording, as 3.9.1, 2.8.2, 2.0.1, 0.11.0.3 and 0.10.2.2 log it:

- become-controller: `3 successfully elected as the controller. Epoch incremented to
  2 and ...` (2.8+), `Epoch incremented to 2` (2.0), `Controller 3 incremented epoch
  to 2` (0.x). What the node knew of the partitions is forgotten, as a new
  controller's context is.
- resign: `Resigned` (2.x+), `Controller resigning, broker id 3` and `Broker 3
  resigned as the controller` (0.x); only while this node was the controller (Kafka
  logs it on every ZooKeeper session loss).
- broker-change: `Newly added brokers: 3, deleted brokers: 2, bounced brokers: , all
  live brokers: 1,3` (no bounced list before 2.x) -> new, dead, bounced.
- controlled-shutdown: `Shutting down broker 2` -> broker_id.
- new-partition, elect-leader: `Changed partition t-0 from OfflinePartition to
  OnlinePartition with state LeaderAndIsr(leader=3, leaderEpoch=2, ...)` (2.x+; ISR
  as `isrWithBrokerEpoch=List(BrokerState(brokerId=3, ...), ...)` in 3.x, `isr=List(3,
  2)` before), `Controller 3 epoch 2 changed partition [t,0] from OfflinePartition to
  OnlinePartition with leader 3` (0.x: leader epoch and ISR from the `Selected new
  leader and ISR {...}` or `After leader election, leader cache ... updated to
  (Leader:3,ISR:3,LeaderEpoch:2,...)` line before it, else the next LeaderAndIsr
  sent). From NewPartition it is a new-partition (old leader -1). The selector is
  "offline" from OfflinePartition; from OnlinePartition "preferred" after `Starting
  replica leader election (PREFERRED) for partitions t-0,...` (2.4+) or `Starting
  preferred replica leader election for partitions [t,0]`, "reassigned" after
  `Leader 2 for partition t-0 being reassigned, is not in the new list of replicas
  ...`, "controlled-shutdown" when the old leader is shutting down, else "online"
  (the log does not say why). old_leader is the leader these logs showed last (-1:
  none; None: not seen since this node became controller). unclean:
  `leaderRecoveryState=RECOVERING` (3.2+), `No broker in ISR is alive for [t,0].
  Elect leader 3 from live brokers 3. There's potential data loss.` (0.x), or an
  offline election of a leader outside the last ISR these logs showed that leaves it
  the ISR alone (2.x logs nothing more).
- remove-from-isr, leader-offline (the controller took a replica out of the ISR;
  leader-offline when that leaves no leader, `Leader:-1`): `Partition t-1 state
  changed to (Leader:2,ISR:2,3,...) after removing replica 1 from the ISR as part of
  transition to OfflineReplica` (2.8+; also logged for a replica already out, which
  changes nothing and is no event), `New leader and ISR for partition [t,1] is
  {"leader":2,"leader_epoch":1,"isr":[2,1]}` (0.x).
- isr-change (the leader changed its ISR and the controller learned it): `ISR for
  partition t-0 updated to LeaderAndIsr(...)` (3.x), `... updated to [3,1,2] and
  zkVersion updated to [2]` (2.8).
- bump-leader-epoch: `Updated leader epoch for partition t-1 to 6` (reassignment).

Each LeaderAndIsr or UpdateMetadata the controller sends shows the partition's state
(`Sending become-leader LeaderAndIsr request ... for partition t-0`, TRACE); a change
it reveals that no line above logged (2.0 logs no ISR removal, and before 2.7 ISR
changes reach the controller only this way) becomes remove-from-isr, leader-offline,
bump-leader-epoch or isr-change. One node's logs hold only what it decided as
controller: the checkers merge every node's. Other lines (other loggers, the brokers'
own partitions, stack traces) are skipped.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import Any

__all__ = ["LeaderState", "controller_events", "leader_state", "write_event_log"]

NO_LEADER = -1

Partition = tuple[str, int]

_LINE = re.compile(r"\[(?P<time>\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}[+-]\d{4})\] "
                   r"[A-Z]+ (?P<message>.*?)(?: \([\w.$]+\))?$")
_IDENT = re.compile(r"^\[(?P<ident>[^\]]*)\]:? ")
_CONTROLLER = re.compile(r"Controller(?: id=| )(?P<id>\d+)(?: epoch[= ](?P<epoch>\d+))?")
_STATE_CHANGE_PREFIX = re.compile(r"^Controller (?P<id>\d+) epoch (?P<epoch>\d+) ")
_TP = r"(?P<tp>\[[^\],]+,\d+\]|\S+-\d+)"

_BECOME = re.compile(r"(?:Epoch incremented to|incremented epoch to) (?P<epoch>\d+)")
_RESIGN = re.compile(r"^(?:Resigned|Controller resigning, broker id \d+|Broker \d+ resigned "
                     r"as the controller)$")
_BROKER_CHANGE = re.compile(r"^Newly added brokers: (?P<new>[\d,]*), deleted brokers: "
                            r"(?P<dead>[\d,]*)(?:, bounced brokers: (?P<bounced>[\d,]*))?, "
                            r"all live brokers")
_SHUTDOWN = re.compile(r"^Shutting down broker (?P<broker>\d+)$")
_PREFERRED = re.compile(r"^Starting (?:replica leader election \(PREFERRED\)|preferred "
                        r"replica leader election) for partitions (?P<tps>.*?)"
                        r"(?: triggered by \w+)?$")
_PREFERRED_FAILED = re.compile(rf"^Partition {_TP} failed to complete preferred replica")
_REASSIGNED = re.compile(rf"^Leader -?\d+ for partition {_TP} being reassigned, is (?:not "
                         r"in the new list of replicas|already in the new list of replicas "
                         r".* but is dead)")
_UNCLEAN = re.compile(rf"^No broker in ISR is alive for {_TP}\. Elect leader \d+ from live "
                      r"brokers .*potential data loss")
_ELECTED = re.compile(rf"^[Cc]hanged partition {_TP} from (?P<source>\w+) to OnlinePartition "
                      r"with (?:state (?P<state>.*)|leader (?P<leader>-?\d+))$")
_ISR_REMOVALS = (
    re.compile(rf"^Partition {_TP} state changed to (?P<state>\(.*\)) after removing replica "
               r"(?P<replica>\d+) from the ISR"),
    re.compile(rf"^New leader and ISR for partition {_TP} is (?P<state>\{{.*\}})$"))
_ISR_UPDATE = re.compile(rf"^ISR for partition {_TP} updated to (?P<state>.*?)"
                         r"(?: and zkVersion updated to \[\d+\])?\.?$")
_EPOCH_BUMP = re.compile(rf"^Updated leader epoch for partition {_TP} to (?P<epoch>\d+)")
_ANNOUNCEMENTS = (
    re.compile(rf"^Selected new leader and ISR (?P<state>\{{.*\}}) for offline partition {_TP}$"),
    re.compile(rf"^After leader election, leader cache for {_TP} is updated to (?P<state>.*)$"),
    re.compile(rf"^Initializing leader and isr for partition {_TP} to (?P<state>.*)$"))
_ANNOUNCEMENT_MAP = re.compile(r"^After leader election, leader cache is updated to Map\((.*)\)$")
_SENT = re.compile(rf"^[Ss]ending (?:become-leader |become-follower )?(?:LeaderAndIsr|"
                   rf"UpdateMetadata) request (?P<state>.*) to brokers? .* for partition {_TP}$")

_LEADER = re.compile(r'(?:\bleader=|\bLeader:|"leader":)(-?\d+)')
_LEADER_EPOCH = re.compile(r'(?:\bleaderEpoch=|\bLeaderEpoch:|"leader_epoch":)(\d+)')
_ISR = re.compile(r"isrWithBrokerEpoch=List\((?P<brokers>(?:BrokerState\([^)]*\)(?:, )?)*)\)"
                  r"|\bisr=(?:List\((?P<list>[\d, ]*)\)|\[(?P<array>[\d, ]*)\]|"
                  r"(?P<plain>\d+(?:,\d+)*))"
                  r"|\bISR:(?P<short>(?:\d+(?:,\d+)*)?)"
                  r'|"isr":\[(?P<json>[\d,]*)\]'
                  r"|^\[(?P<bare>[\d,]*)\]$")
_RECOVERING = re.compile(r"(?:leaderRecoveryState=|LeaderRecoveryState:)(?:RECOVERING|1)\b")


@dataclass(frozen=True)
class LeaderState:
    """A partition's leader, leader epoch and ISR as one log line shows them (each None
    when the line leaves it out), and whether the leader is still recovering (unclean)."""

    leader: int | None = None
    leader_epoch: int | None = None
    isr: tuple[int, ...] | None = None
    recovering: bool = False


def leader_state(text: str) -> LeaderState:
    """The leader state in any of Kafka's renderings: `LeaderAndIsr(leader=3, ...)`,
    `(Leader:3,ISR:3,2,LeaderEpoch:2,...)`, `{"leader":3,"leader_epoch":2,"isr":[3]}`,
    `PartitionState(... leader=3, leaderEpoch=2, isr=3,2, ...)`, `[3,2]` (an ISR)."""
    leader = _LEADER.search(text)
    epoch = _LEADER_EPOCH.search(text)
    isr = _ISR.search(text)
    members = None
    if isr is not None:
        if isr["brokers"] is not None:
            members = tuple(int(b) for b in re.findall(r"brokerId=(\d+)", isr["brokers"]))
        else:
            found = next(g for g in isr.groups()[1:] if g is not None)
            members = tuple(int(b) for b in re.findall(r"\d+", found))
    return LeaderState(int(leader[1]) if leader else None, int(epoch[1]) if epoch else None,
                       members, _RECOVERING.search(text) is not None)


def _partition(name: str) -> Partition:
    if name.startswith("["):
        topic, _, number = name[1:-1].rpartition(",")
    else:
        topic, _, number = name.rpartition("-")
    return topic, int(number)


def _brokers(text: str | None) -> list[int]:
    return [int(b) for b in (text or "").split(",") if b]


def _epoch_ms(stamp: str) -> int:
    return round(datetime.fromisoformat(stamp).timestamp() * 1000)


@dataclass(frozen=True)
class _Line:
    time: int
    message: str
    controller_id: int | None
    controller_epoch: int | None


def _lines(text: str) -> Iterator[_Line]:
    for raw in text.splitlines():
        line = _LINE.match(raw)
        if line is None:
            continue  # a stack trace or a continuation
        message = line["message"]
        ident = _IDENT.match(message)
        if ident is not None:
            controller = _CONTROLLER.search(ident["ident"])
            message = message[ident.end():]
        else:
            controller = _STATE_CHANGE_PREFIX.match(message)
            if controller is not None:
                message = message[controller.end():]
        yield _Line(_epoch_ms(line["time"]), message,
                    int(controller["id"]) if controller else None,
                    int(controller["epoch"]) if controller and controller["epoch"] else None)


def _first(patterns: tuple[re.Pattern[str], ...], message: str) -> re.Match[str] | None:
    return next((m for m in (p.match(message) for p in patterns) if m is not None), None)


class _Controller:
    """Replays one node's controller lines, in time order, into events."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.controller_id: int | None = None
        self.controller_epoch: int | None = None
        self.acting = False
        self._forget()

    def _forget(self) -> None:
        """What a controller knows of the partitions, lost when it (re)starts or resigns."""
        self.partitions: dict[Partition, LeaderState] = {}
        self.announced: dict[Partition, LeaderState] = {}
        self.selectors: dict[Partition, str] = {}
        self.warned_unclean: set[Partition] = set()
        self.shutting_down: set[int] = set()
        self.incomplete: dict[Partition, tuple[dict[str, Any], LeaderState | None, str]] = {}

    def _emit(self, line: _Line, event: str, **fields: Any) -> dict[str, Any]:
        record = {"time": line.time,
                  "controller_id": (line.controller_id if line.controller_id is not None
                                    else self.controller_id),
                  "controller_epoch": (line.controller_epoch if line.controller_epoch
                                       is not None else self.controller_epoch),
                  "event": event, **fields}
        self.events.append(record)
        return record

    def _emit_partition(self, line: _Line, event: str, tp: Partition, old_leader: int | None,
                        state: LeaderState, selector: str | None = None,
                        unclean: bool = False) -> dict[str, Any]:
        return self._emit(line, event, topic=tp[0], partition=tp[1], selector=selector,
                          old_leader=old_leader, new_leader=state.leader,
                          leader_epoch=state.leader_epoch,
                          isr=list(state.isr) if state.isr is not None else None,
                          unclean=unclean)

    def read(self, line: _Line) -> None:
        message = line.message
        if match := _BECOME.search(message):
            self._forget()
            self.acting = True
            self.controller_id = line.controller_id
            self.controller_epoch = int(match["epoch"])
            self._emit(line, "become-controller")
        elif _RESIGN.match(message):
            if self.acting:
                self._emit(line, "resign")
                self.acting = False
                self._forget()
        elif match := _BROKER_CHANGE.match(message):
            new, dead, bounced = (_brokers(match[k]) for k in ("new", "dead", "bounced"))
            self.shutting_down.difference_update(new + dead + bounced)
            self._emit(line, "broker-change", new=new, dead=dead, bounced=bounced)
        elif match := _SHUTDOWN.match(message):
            self.shutting_down.add(int(match["broker"]))
            self._emit(line, "controlled-shutdown", broker_id=int(match["broker"]))
        elif match := _PREFERRED.match(message):
            for name in re.findall(r"\[[^\]]+\]|[^,\s]+", match["tps"]):
                self.selectors[_partition(name)] = "preferred"
        elif match := _PREFERRED_FAILED.match(message):
            self.selectors.pop(_partition(match["tp"]), None)
        elif match := _REASSIGNED.match(message):
            self.selectors[_partition(match["tp"])] = "reassigned"
        elif match := _UNCLEAN.match(message):
            self.warned_unclean.add(_partition(match["tp"]))
        elif match := _ELECTED.match(message):
            state = leader_state(match["state"] or f"leader={match['leader']}")
            self._elected(line, _partition(match["tp"]), match["source"], state)
        elif match := _first(_ISR_REMOVALS, message):
            replica = match.groupdict().get("replica")
            self._removed_from_isr(line, _partition(match["tp"]), leader_state(match["state"]),
                                   int(replica) if replica else None)
        elif match := _ISR_UPDATE.match(message):
            self._isr_changed(line, _partition(match["tp"]), leader_state(match["state"]))
        elif match := _EPOCH_BUMP.match(message):
            self._epoch_bumped(line, _partition(match["tp"]), int(match["epoch"]))
        elif match := _first(_ANNOUNCEMENTS, message):
            self.announced[_partition(match["tp"])] = leader_state(match["state"])
        elif match := _ANNOUNCEMENT_MAP.match(message):
            for each in re.finditer(rf"{_TP} -> (?P<state>\([^)]*\))", match[1]):
                self.announced[_partition(each["tp"])] = leader_state(each["state"])
        elif match := _SENT.match(message):
            self._sent(line, _partition(match["tp"]), leader_state(match["state"]))

    def _elected(self, line: _Line, tp: Partition, source: str, state: LeaderState) -> None:
        announced = self.announced.pop(tp, None)
        if state.leader_epoch is None and announced and announced.leader == state.leader:
            state = announced
        prior = self.partitions.get(tp)
        self.partitions[tp] = state
        selector = self.selectors.pop(tp, None)
        warned = tp in self.warned_unclean
        self.warned_unclean.discard(tp)
        if source == "NewPartition":
            record = self._emit_partition(line, "new-partition", tp, NO_LEADER, state)
        else:
            old_leader = prior.leader if prior else None
            if source == "OfflinePartition":
                selector = "offline"
            elif selector is None:
                selector = ("controlled-shutdown" if old_leader in self.shutting_down
                            else "online")
            record = self._emit_partition(line, "elect-leader", tp, old_leader, state, selector,
                                          state.recovering or warned)
        if state.leader_epoch is None:
            self.incomplete[tp] = (record, prior, source)
        elif source == "OfflinePartition":
            record["unclean"] |= _outside_isr(prior, state)

    def _removed_from_isr(self, line: _Line, tp: Partition, state: LeaderState,
                          replica: int | None) -> None:
        prior = self.partitions.get(tp)
        if prior == state:
            return  # Kafka also logs the removal of a replica already out of the ISR
        self.partitions[tp] = state
        if prior is not None:
            old_leader = prior.leader
        else:  # only the leader's own removal leaves the partition without one
            old_leader = replica if state.leader == NO_LEADER else state.leader
        event = "leader-offline" if state.leader == NO_LEADER else "remove-from-isr"
        self._emit_partition(line, event, tp, old_leader, state)

    def _isr_changed(self, line: _Line, tp: Partition, state: LeaderState) -> None:
        known = self.partitions.get(tp, LeaderState())
        state = LeaderState(known.leader if state.leader is None else state.leader,
                            known.leader_epoch if state.leader_epoch is None
                            else state.leader_epoch, state.isr, state.recovering)
        self.partitions[tp] = state
        self._emit_partition(line, "isr-change", tp, state.leader, state)

    def _epoch_bumped(self, line: _Line, tp: Partition, epoch: int) -> None:
        state = replace(self.partitions.get(tp, LeaderState()), leader_epoch=epoch)
        self.partitions[tp] = state
        self._emit_partition(line, "bump-leader-epoch", tp, state.leader, state)

    def _sent(self, line: _Line, tp: Partition, sent: LeaderState) -> None:
        """A state the controller sent to brokers: it completes an election logged
        without its epoch and ISR, or shows a change that no line logged."""
        if tp in self.incomplete and self.incomplete[tp][0]["new_leader"] == sent.leader:
            record, prior, source = self.incomplete.pop(tp)
            record.update(leader_epoch=sent.leader_epoch,
                          isr=list(sent.isr) if sent.isr is not None else None)
            if source == "OfflinePartition":
                record["unclean"] |= _outside_isr(prior, sent)
            self.partitions[tp] = sent
            return
        known = self.partitions.get(tp)
        if known is None or known.leader_epoch is None or sent.leader_epoch is None:
            self.partitions[tp] = sent
            return
        if sent.leader_epoch < known.leader_epoch:
            return  # a state older than one this log already showed
        self.partitions[tp] = sent
        same_isr = set(sent.isr or ()) == set(known.isr or ())
        if sent.leader_epoch == known.leader_epoch:
            if sent.leader == known.leader and not same_isr:
                self._emit_partition(line, "isr-change", tp, sent.leader, sent)
        elif sent.leader == NO_LEADER:
            self._emit_partition(line, "leader-offline", tp, known.leader, sent)
        elif sent.leader == known.leader:
            event = "bump-leader-epoch" if same_isr else "remove-from-isr"
            self._emit_partition(line, event, tp, known.leader, sent)


def _outside_isr(prior: LeaderState | None, elected: LeaderState) -> bool:
    """An election that had to go outside the last known ISR: unclean."""
    return (prior is not None and prior.isr is not None and elected.isr is not None
            and elected.leader not in prior.isr and elected.isr == (elected.leader,))


def controller_events(controller_log: str = "", state_change_log: str = "") -> list[dict]:
    """The controller events of one node's controller.log and state-change.log texts,
    in time order (fields as `checker.cluster.event_log`, plus new/dead/bounced and broker_id)."""
    ordered = sorted(
        ((line.time, rank, number, line)
         for rank, text in enumerate((controller_log, state_change_log))
         for number, line in enumerate(_lines(text))),
        key=lambda item: item[:3])
    controller = _Controller()
    for *_, line in ordered:
        controller.read(line)
    return controller.events


def write_event_log(node_dir: Path) -> Path:
    """`<node_dir>/controller-events.jsonl` from the node's controller.log and
    state-change.log; FileNotFoundError when it has neither."""
    logs = [node_dir / "controller.log", node_dir / "state-change.log"]
    if not any(path.is_file() for path in logs):
        raise FileNotFoundError(f"no controller.log or state-change.log in {node_dir}")
    texts = [path.read_text(encoding="utf-8", errors="replace") if path.is_file() else ""
             for path in logs]
    target = node_dir / "controller-events.jsonl"
    target.write_text("".join(json.dumps(event) + "\n" for event in controller_events(*texts)),
                      encoding="utf-8")
    return target
