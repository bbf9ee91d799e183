"""A subscribe-mode history read as consumer groups (the groups history contract).

`read_groups` makes one pass over the ops and rebuilds, per group (the `group` field of
its members' ops):

- members: the processes whose ops carry the group, each live until its `info`
  completion (a crash, or any op of unknown outcome) or its invoke that never completed,
  else to the history's end;
- ownership: from the `rebalances` entries of completions (eager protocol), a member owns
  key k from an entry assigning k to its next entry revoking k (or losing it), to a new
  assignment of k, or to the end of its process (`Ownership`);
- deliveries: the records of the members' ok polls; fetches add the records a poll fetched
  but did not process (`unprocessed`, when its before-process commit failed);
- commits: commit ops (ok / fail / info, or never completed) and the `commit` field of
  before-process polls; the final `committed` reads (OffsetFetch).

The log of each key, shared by all groups, is `Log`: acknowledged records (ok sends with
an offset, and unknown-outcome sends whose value some poll read, at the offset read),
less those whose offset a poll read holding another value (overwritten: a truncated log,
the queue checker's lost-write); and every offset any poll observed.

`rebalances` clusters a group's callbacks into rebalances: the assignments of one
generation (or, without generations, a run of assignments after revocations), starting
at the first revocation since the previous rebalance ended.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from checker.history import NEMESIS, Op
from checker.queue.events import Key, normalise_key

__all__ = ["Commit", "CommittedRead", "Delivery", "Entry", "Group", "GroupsHistory", "Log",
           "Member", "Ownership", "Rebalance", "read_groups", "rebalances"]

SEND_FUNCTIONS = frozenset({"send", "txn"})


@dataclass(frozen=True, slots=True)
class Entry:
    """One rebalance callback a member observed."""

    time: int
    process: Any
    generation: int | None
    member: str | None
    assigned: tuple[Key, ...]
    revoked: tuple[Key, ...]
    lost: bool
    op: int


@dataclass(slots=True)
class Ownership:
    """A member owning a key from `start` to `end` (None: to the history's end).
    `end_reason`: revoked, lost, reassigned, process-end or history-end. `known_until`:
    when the ownership is last certain; earlier than `end` when an op of unknown outcome
    ended the process (the ownership may have ended any time after that op began)."""

    key: Key
    process: Any
    member: str | None
    generation: int | None
    start: int
    start_op: int
    end: int | None = None
    end_op: int | None = None
    end_generation: int | None = None
    end_reason: str = "history-end"
    known_until: int | None = None


@dataclass(frozen=True, slots=True)
class Delivery:
    """Records of one key that one ok poll of a member returned (`processed` False: fetched
    but not processed, its before-process commit having failed)."""

    key: Key
    process: Any
    time: int
    op: int
    records: tuple[tuple[int, Any], ...]
    processed: bool = True


@dataclass(frozen=True, slots=True)
class Commit:
    """A commit of next offsets: `status` ok, fail or info; `complete` None when it never
    completed. `source`: "commit" (an op) or "poll" (a before-process poll's commit)."""

    offsets: Mapping[Key, int]
    status: str
    invoke: int
    complete: int | None
    op: int
    process: Any
    source: str = "commit"


@dataclass(frozen=True, slots=True)
class CommittedRead:
    """A final OffsetFetch: key -> next offset (None: nothing committed)."""

    offsets: Mapping[Key, int | None]
    invoke: int
    complete: int
    op: int


@dataclass(slots=True)
class Member:
    """A process of the group: its end (None: live to the history's end) and the span of
    its ok polls."""

    process: Any
    end: int | None = None
    first_poll: int | None = None
    last_poll: int | None = None


@dataclass
class Group:
    name: str
    members: dict[Any, Member] = field(default_factory=dict)
    entries: list[Entry] = field(default_factory=list)
    ownerships: list[Ownership] = field(default_factory=list)
    deliveries: list[Delivery] = field(default_factory=list)
    commits: list[Commit] = field(default_factory=list)
    committed: list[CommittedRead] = field(default_factory=list)


@dataclass
class Log:
    """Per key: acknowledged records (offset -> (value, send op)), overwritten ones, and
    the sorted offsets any poll observed or any ack named."""

    records: dict[Key, dict[int, tuple[Any, int]]] = field(default_factory=dict)
    overwritten: dict[Key, dict[int, tuple[Any, int]]] = field(default_factory=dict)
    offsets: dict[Key, list[int]] = field(default_factory=dict)

    def first_at_or_after(self, key: Key, offset: int | None) -> int | None:
        """The first observed offset of `key` at or after `offset` (None: the beginning)."""
        offsets = self.offsets.get(key, [])
        at = 0 if offset is None else bisect_left(offsets, offset)
        return offsets[at] if at < len(offsets) else None

    def count_between(self, key: Key, low: int, high: int) -> int:
        """How many observed offsets of `key` lie in [low, high)."""
        offsets = self.offsets.get(key, [])
        return bisect_left(offsets, high) - bisect_left(offsets, low)


@dataclass
class GroupsHistory:
    groups: dict[str, Group]
    log: Log
    keys: list[Key]
    end: int


@dataclass(frozen=True)
class Rebalance:
    """A group's rebalance: from its first revocation (or first assignment) to its last
    assignment; `entries` are op indexes of its callbacks."""

    generation: int | None
    start: int
    end: int
    members: tuple[Any, ...]
    ops: tuple[int, ...]


def _keys(value: Any) -> tuple[Key, ...]:
    return tuple(normalise_key(k) for k in value or ())


def _offsets(value: Any) -> dict[Key, int]:
    if not isinstance(value, Mapping):
        return {}
    return {normalise_key(k): n for k, n in value.items()
            if isinstance(n, int) and not isinstance(n, bool)}


def _polled(value: Any) -> dict[Key, list[tuple[int, Any]]]:
    """key -> [(offset, value)] of the poll micro-ops of a completed op's value."""
    found: dict[Key, list[tuple[int, Any]]] = {}
    if not isinstance(value, list):
        return found
    for micro in value:
        if isinstance(micro, list) and len(micro) >= 2 and micro[0] == "poll" \
                and isinstance(micro[1], Mapping):
            for key, pairs in micro[1].items():
                found.setdefault(normalise_key(key), []).extend(
                    (p[0], p[1]) for p in pairs or () if isinstance(p, list) and len(p) == 2)
    return found


def _sent(value: Any) -> list[tuple[Key, int | None, Any]]:
    """(key, offset or None, value) of the send micro-ops of an op's value."""
    found = []
    if not isinstance(value, list):
        return found
    for micro in value:
        if isinstance(micro, list) and len(micro) == 3 and micro[0] == "send":
            payload, offset = micro[2], None
            if isinstance(payload, list) and len(payload) == 2:
                offset, payload = payload
            found.append((normalise_key(micro[1]), offset if isinstance(offset, int) else None,
                          payload))
    return found


class _Reader:
    """The single pass of `read_groups`."""

    def __init__(self) -> None:
        self.groups: dict[str, Group] = {}
        self.group_of: dict[Any, str] = {}
        self.invokes: dict[Any, Op] = {}
        self.owned: dict[Any, dict[Key, Ownership]] = defaultdict(dict)
        self.acked: dict[Key, dict[int, tuple[Any, int]]] = defaultdict(dict)
        self.unknown_sends: dict[Any, tuple[Key, int]] = {}
        self.reads: dict[Key, dict[int, set[Any]]] = defaultdict(lambda: defaultdict(set))
        self.read_values: dict[Any, tuple[Key, int]] = {}
        self.keys: set[Key] = set()
        self.end = 0

    def group(self, op: Op) -> Group | None:
        name = op.extra.get("group")
        if name is None and isinstance(op.value, Mapping):
            name = op.value.get("group")
        if name is None:
            name = self.group_of.get(op.process)
        if name is None:
            return None
        name = str(name)
        self.group_of.setdefault(op.process, name)
        found = self.groups.get(name)
        if found is None:
            found = self.groups[name] = Group(name)
        if op.process not in found.members:
            found.members[op.process] = Member(op.process)
        return found

    def read(self, op: Op) -> None:
        self.end = max(self.end, op.time)
        if op.process == NEMESIS:
            return
        if op.type == "invoke":
            self.invokes[op.process] = op
            self.group(op)
            return
        invoke = self.invokes.pop(op.process, None)
        self.sends(op)
        group = self.group(op)
        polled = _polled(op.value) if op.type == "ok" else {}
        self.observe(polled)
        if group is not None:
            self.member_op(group, op, invoke, polled)

    def sends(self, op: Op) -> None:
        if op.f not in SEND_FUNCTIONS:
            return
        for key, offset, value in _sent(op.value):
            self.keys.add(key)
            if op.type == "ok" and offset is not None:
                self.acked[key].setdefault(offset, (value, op.index))
            elif op.type == "info":
                self.unknown_sends[value] = (key, op.index)

    def observe(self, polled: Mapping[Key, list[tuple[int, Any]]]) -> None:
        for key, pairs in polled.items():
            self.keys.add(key)
            for offset, value in pairs:
                self.reads[key][offset].add(value)
                self.read_values.setdefault(value, (key, offset))

    def member_op(self, group: Group, op: Op, invoke: Op | None,
                  polled: Mapping[Key, list[tuple[int, Any]]]) -> None:
        member = group.members[op.process]
        started = invoke.time if invoke is not None else op.time
        for raw in op.extra.get("rebalances") or ():
            self.rebalance(group, op, raw)
        if op.f == "poll" and op.type == "ok":
            member.first_poll = started if member.first_poll is None else member.first_poll
            member.last_poll = op.time
            for key, pairs in polled.items():
                if pairs:
                    group.deliveries.append(Delivery(key, op.process, op.time, op.index,
                                                     tuple(pairs)))
            for key, offsets in _offsets_lists(op.extra.get("unprocessed")).items():
                group.deliveries.append(Delivery(key, op.process, op.time, op.index,
                                                 tuple((o, None) for o in offsets), False))
        if op.f == "poll":
            self.poll_commit(group, op, started)
        elif op.f == "commit":
            offsets = _offsets(invoke.value if invoke is not None else op.value)
            group.commits.append(Commit(offsets, op.type, started, op.time, op.index,
                                        op.process))
        elif op.f == "committed" and op.type == "ok" and isinstance(op.value, Mapping):
            raw = op.value.get("offsets") or {}
            group.committed.append(CommittedRead(
                {normalise_key(k): n if isinstance(n, int) else None for k, n in raw.items()},
                started, op.time, op.index))
        if op.type == "info":
            self.end_member(member, op, started)

    def poll_commit(self, group: Group, op: Op, started: int) -> None:
        commit = op.extra.get("commit")
        if not isinstance(commit, Mapping):
            return
        when = commit.get("time")
        group.commits.append(Commit(_offsets(commit.get("offsets")), str(commit.get("type")),
                                    started, when if isinstance(when, int) else op.time,
                                    op.index, op.process, "poll"))

    def rebalance(self, group: Group, op: Op, raw: Any) -> None:
        if not isinstance(raw, Mapping):
            return
        when = raw.get("time")
        generation = raw.get("generation")
        entry = Entry(when if isinstance(when, int) else op.time, op.process,
                      generation if isinstance(generation, int) else None,
                      None if raw.get("member") is None else str(raw.get("member")),
                      _keys(raw.get("assigned")), _keys(raw.get("revoked")),
                      bool(raw.get("lost")), op.index)
        group.entries.append(entry)
        for key in entry.revoked:
            self.close(op.process, key, entry.time, entry.op, entry.generation,
                       "lost" if entry.lost else "revoked")
        for key in entry.assigned:
            self.keys.add(key)
            self.close(op.process, key, entry.time, entry.op, entry.generation, "reassigned")
            owned = Ownership(key, op.process, entry.member, entry.generation, entry.time,
                              entry.op)
            group.ownerships.append(owned)
            self.owned[op.process][key] = owned

    def close(self, process: Any, key: Key, when: int, op: int | None,
              generation: int | None, reason: str, known_until: int | None = None) -> None:
        owned = self.owned[process].pop(key, None)
        if owned is not None:
            owned.end, owned.end_op = when, op
            owned.end_generation, owned.end_reason = generation, reason
            owned.known_until = min(when, known_until) if known_until is not None else when

    def end_member(self, member: Member, op: Op, began: int | None = None) -> None:
        """The member's process ended with `op` (an info completion that `began` then, or
        an invoke that never completed: its process may have died there)."""
        member.end = op.time
        for key in list(self.owned.get(member.process, ())):
            self.close(member.process, key, op.time, op.index, None, "process-end", began)

    def unfinished(self) -> None:
        """Ops never completed: their sends and commits are of unknown outcome."""
        for invoke in self.invokes.values():
            if invoke.f in SEND_FUNCTIONS:
                for key, _, value in _sent(invoke.value):
                    self.unknown_sends[value] = (key, invoke.index)
            group = self.groups.get(self.group_of.get(invoke.process, ""))
            if group is None:
                continue
            if invoke.f == "commit":
                group.commits.append(Commit(_offsets(invoke.value), "info", invoke.time, None,
                                            invoke.index, invoke.process))
            self.end_member(group.members[invoke.process], invoke)

    def log(self) -> Log:
        log = Log()
        for value, (key, offset) in self.read_values.items():
            if value in self.unknown_sends and self.unknown_sends[value][0] == key:
                self.acked[key].setdefault(offset, (value, self.unknown_sends[value][1]))
        for key in self.keys:
            records, overwritten = {}, {}
            for offset, (value, op) in self.acked.get(key, {}).items():
                seen = self.reads.get(key, {}).get(offset, set())
                target = overwritten if seen - {value} else records
                target[offset] = (value, op)
            log.records[key] = records
            log.overwritten[key] = overwritten
            log.offsets[key] = sorted(set(records) | set(self.reads.get(key, {})))
        return log


def _offsets_lists(value: Any) -> dict[Key, list[int]]:
    if not isinstance(value, Mapping):
        return {}
    return {normalise_key(k): [o for o in offsets if isinstance(o, int)]
            for k, offsets in value.items() if isinstance(offsets, list) and offsets}


def read_groups(ops: Iterable[Op], keys: Iterable[Any] = ()) -> GroupsHistory:
    """Every group of a history, and the topic's log; `keys` adds keys (opts["keys"])."""
    reader = _Reader()
    for op in ops:
        reader.read(op)
    reader.unfinished()
    reader.keys.update(normalise_key(k) for k in keys)
    return GroupsHistory(reader.groups, reader.log(), sorted(reader.keys, key=repr),
                         reader.end)


def rebalances(group: Group) -> list[Rebalance]:
    """The group's rebalances in time order (see the module docstring)."""
    entries = sorted(group.entries, key=lambda e: (e.time, e.op))
    clusters: dict[Any, list[Entry]] = {}
    revoking: list[Entry] = []
    anonymous = 0
    last_was_assign = False
    pending: dict[Any, list[Entry]] = {}
    for entry in entries:
        if not entry.assigned:
            if last_was_assign:
                anonymous += 1
            revoking.append(entry)
            last_was_assign = False
            continue
        label = ("generation", entry.generation) if entry.generation is not None \
            else ("anonymous", anonymous)
        if label not in clusters:
            clusters[label] = []
            pending[label] = revoking
            revoking = []
        clusters[label].append(entry)
        last_was_assign = True
    found = []
    for label, assigns in clusters.items():
        revokes = pending[label]
        every = revokes + assigns
        found.append(Rebalance(label[1] if label[0] == "generation" else None,
                               min(e.time for e in every), max(e.time for e in assigns),
                               tuple(dict.fromkeys(e.process for e in assigns)),
                               tuple(sorted({e.op for e in every}))))
    return sorted(found, key=lambda r: (r.start, r.end))
