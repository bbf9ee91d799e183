"""The consumer-group anomalies of one group, each found by a pure function.

Each finder takes a `Group` rebuilt by `checker.groups.membership` (and the topic's `Log`)
and returns witnesses: JSON objects naming the ops by index (`ops`), the group, key,
members (process ids, `member-ids` the client's member ids), generations and times in
seconds since the test started. The definitions are in `checker.groups.checker`' docstring.
Every finder is linear or n log n in the group's ops.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from checker.groups.membership import Commit, Delivery, Group, Log, Ownership
from checker.queue.events import Key

__all__ = ["Charged", "Deliveries", "attribute_duplicates", "commit_rewinds", "commit_skips",
           "deliveries", "orphaned_partitions", "repeated_witness", "resumes", "seconds",
           "split_assignments"]

NS = 1e9
INFINITY = float("inf")
SHOWN_OPS = 4


def seconds(ns: float | None) -> float | None:
    return None if ns is None or ns == INFINITY else round(ns / NS, 6)


def _by_key(ownerships: Iterable[Ownership]) -> dict[Key, list[Ownership]]:
    found: dict[Key, list[Ownership]] = defaultdict(list)
    for owned in ownerships:
        found[owned.key].append(owned)
    for items in found.values():
        items.sort(key=lambda o: (o.start, o.start_op))
    return found


def _end(owned: Ownership, history_end: int) -> int:
    return history_end if owned.end is None else owned.end


def _known_end(owned: Ownership, history_end: int) -> int:
    """When the ownership is last certain (`Ownership.known_until`)."""
    if owned.known_until is not None:
        return owned.known_until
    return _end(owned, history_end)


def _same_rebalance(earlier: Ownership, later: Ownership) -> bool:
    """The earlier owner revoked the key in the generation that assigned it to the later."""
    return (earlier.end_reason in ("revoked", "lost") and earlier.end_generation is not None
            and later.generation is not None and earlier.end_generation == later.generation)


# --- split-assignment --------------------------------------------------------------------------

def split_assignments(group: Group, history_end: int, *, one_generation_excuses: bool = True
                      ) -> list[dict[str, Any]]:
    """Two members owning a key over a common time, not excused by one rebalance. An
    ownership its client ended as lost is a zombie's (removed from the group while it
    could not tell, e.g. paused past its session timeout): the coordinator had given the
    key away already, so it splits nothing. An ownership counts only while it is certain:
    up to the start of an op of unknown outcome that ended its process. Under the
    consumer protocol of KIP-848 (`one_generation_excuses` false) nothing excuses: the
    coordinator assigns a partition only once its owner acknowledged the revocation, and
    the numbers are member epochs, each member's own."""
    found = []
    for key, items in _by_key(group.ownerships).items():
        active: list[Ownership] = []
        for later in items:
            active = [o for o in active if _known_end(o, history_end) > later.start
                      and o.end_reason != "lost"]
            for earlier in active:
                if earlier.process != later.process and not (
                        one_generation_excuses and _same_rebalance(earlier, later)):
                    found.append(_split_witness(group, key, earlier, later, history_end))
            active.append(later)
    return found


def _split_witness(group: Group, key: Key, earlier: Ownership, later: Ownership,
                   history_end: int) -> dict[str, Any]:
    until = min(_known_end(earlier, history_end), _known_end(later, history_end))
    ops = sorted({earlier.start_op, later.start_op,
                  *([earlier.end_op] if earlier.end_op is not None else [])})
    return {"group": group.name, "key": key, "ops": ops,
            "members": [earlier.process, later.process],
            "member-ids": [earlier.member, later.member],
            "generations": {"earlier-assigned": earlier.generation,
                            "earlier-ended": earlier.end_generation,
                            "earlier-ended-by": earlier.end_reason,
                            "later-assigned": later.generation},
            "overlap-s": [seconds(later.start), seconds(until)],
            "why": f"member {earlier.process} owned key {key!r} until "
                   f"{seconds(_known_end(earlier, history_end))} s ({earlier.end_reason}) "
                   "while "
                   f"member {later.process} owned it from {seconds(later.start)} s"}


# --- orphaned-partition ------------------------------------------------------------------------

def _polling_windows(group: Group) -> list[tuple[int, int]]:
    """The merged times when some member was live and polling (first to last ok poll)."""
    windows = sorted((m.first_poll, m.last_poll if m.end is None else min(m.last_poll, m.end))
                     for m in group.members.values()
                     if m.first_poll is not None and m.last_poll is not None)
    merged: list[list[int]] = []
    for start, end in windows:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    return [(start, end) for start, end in merged]


def _without(windows: Sequence[tuple[int, int]],
             holes: Sequence[tuple[int, int]]) -> list[tuple[int, int]]:
    """The merged `windows` minus the time covered by any of `holes`."""
    result = list(windows)
    for low, high in holes:
        cut: list[tuple[int, int]] = []
        for start, end in result:
            if end <= low or start >= high:
                cut.append((start, end))
                continue
            if start < low:
                cut.append((start, low))
            if end > high:
                cut.append((high, end))
        result = cut
    return result


def _covered(windows: Sequence[tuple[int, int]], starts: Sequence[int], low: int,
             high: int) -> int:
    """Nanoseconds of [low, high) inside the merged windows."""
    total = 0
    at = max(0, bisect_right(starts, low) - 1)
    while at < len(windows) and windows[at][0] < high:
        start, end = windows[at]
        total += max(0, min(end, high) - max(start, low))
        at += 1
    return total


def _unowned(items: Sequence[Ownership], begin: int, finish: int,
             history_end: int) -> list[tuple[int, int, Ownership | None, Ownership | None]]:
    """Gaps in [begin, finish) when nobody owns the key: (from, to, ownership whose end
    opened it, ownership whose start closed it)."""
    changes = sorted([(o.start, 1, i) for i, o in enumerate(items)] +
                     [(_end(o, history_end), -1, i) for i, o in enumerate(items)],
                     key=lambda c: (c[0], c[1]))
    gaps = []
    owners, since, opened_by = 0, begin, None
    for when, delta, at in changes:
        if delta < 0:
            owners -= 1
            if owners == 0:
                since, opened_by = max(when, begin), items[at]
            continue
        if owners == 0 and when > since:
            gaps.append((since, min(when, finish), opened_by, items[at]))
        owners += 1
    if owners == 0 and finish > since:
        gaps.append((since, finish, opened_by, None))
    return [gap for gap in gaps if gap[1] > gap[0]]


def orphaned_partitions(group: Group, keys: Iterable[Key], bound_ns: int,
                        history_end: int, faults: Sequence[tuple[int, int]] = ()
                        ) -> list[dict[str, Any]]:
    """Keys nobody owns for longer than the bound, counted while members are live and
    polling and no fault (a [start, end) period) is in force, after the group's first
    assignment."""
    assigned = [e.time for e in group.entries if e.assigned]
    windows = _without(_polling_windows(group), faults)
    if not assigned or not windows:
        return []
    begin, finish = min(assigned), windows[-1][1]
    starts = [w[0] for w in windows]
    by_key = _by_key(group.ownerships)
    found = []
    for key in keys:
        for low, high, opened, closed in _unowned(by_key.get(key, []), begin, finish,
                                                  history_end):
            unowned = _covered(windows, starts, low, high)
            if unowned > bound_ns:
                ops = sorted({o.end_op if o is opened else o.start_op
                              for o in (opened, closed) if o is not None
                              and (o.end_op if o is opened else o.start_op) is not None})
                found.append({"group": group.name, "key": key, "ops": ops,
                              "unowned-s": [seconds(low), seconds(high)],
                              "seconds": seconds(unowned), "bound-s": seconds(bound_ns),
                              "previous-owner": None if opened is None else opened.process,
                              "next-owner": None if closed is None else closed.process,
                              "why": f"no live member owned key {key!r} for "
                                     f"{seconds(unowned)} s of polling without faults"})
    return found


# --- commits -----------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Delivered:
    """A key's records in offset order and, per prefix, the latest first delivery to the
    group among them (time, offset): a record at an offset below n was delivered before
    time t iff that of the prefix below n is at most t."""

    offsets: list[int]
    latest: list[tuple[float, int]]


def _delivered(group: Group, log: Log) -> dict[Key, _Delivered]:
    first: dict[tuple[Key, int], int] = {}
    for delivery in group.deliveries:
        if not delivery.processed:
            continue
        for offset, _ in delivery.records:
            seen = first.get((delivery.key, offset))
            if seen is None or delivery.time < seen:
                first[delivery.key, offset] = delivery.time
    found = {}
    for key, records in log.records.items():
        offsets = sorted(records)
        latest: list[tuple[float, int]] = []
        for offset in offsets:
            here = (first.get((key, offset), INFINITY), offset)
            latest.append(max(latest[-1], here) if latest else here)
        found[key] = _Delivered(offsets, latest)
    return found


def _undelivered_below(delivered: _Delivered | None, next_offset: int,
                       when: float) -> tuple[float, int] | None:
    """A record below `next_offset` not delivered to the group by `when`, if any."""
    if delivered is None:
        return None
    below = bisect_left(delivered.offsets, next_offset)
    if below == 0 or delivered.latest[below - 1][0] <= when:
        return None
    return delivered.latest[below - 1]


def _ok_commits(group: Group) -> dict[Key, list[tuple[Commit, int]]]:
    found: dict[Key, list[tuple[Commit, int]]] = defaultdict(list)
    for commit in group.commits:
        if commit.status == "ok" and commit.complete is not None:
            for key, offset in commit.offsets.items():
                found[key].append((commit, offset))
    return found


def commit_skips(group: Group, log: Log) -> list[dict[str, Any]]:
    """Ok commits (and final committed offsets no ok commit explains) of a next offset
    beyond a record the group had not delivered when the commit completed."""
    delivered = _delivered(group, log)
    found = []
    best: dict[Key, list[tuple[int, int]]] = defaultdict(list)
    for key, commits in _ok_commits(group).items():
        for commit, offset in commits:
            best[key].append((commit.complete, offset))
            skipped = _undelivered_below(delivered.get(key), offset, commit.complete)
            if skipped is not None:
                found.append(_skip_witness(group, log, key, offset, skipped,
                                           [commit.op], f"op {commit.op} committed"))
    for read in group.committed:
        for key, offset in read.offsets.items():
            explained = any(n >= offset for done, n in best.get(key, ()) if done <= read.invoke) \
                if offset is not None else True
            if explained:
                continue
            skipped = _undelivered_below(delivered.get(key), offset, read.invoke)
            if skipped is not None:
                found.append(_skip_witness(group, log, key, offset, skipped, [read.op],
                                           f"the final committed read {read.op} shows"))
    return found


def _skip_witness(group: Group, log: Log, key: Key, offset: int, skipped: tuple[float, int],
                  ops: list[int], what: str) -> dict[str, Any]:
    when, record = skipped
    value, send = log.records[key][record]
    return {"group": group.name, "key": key, "ops": sorted({*ops, send}),
            "committed": offset, "offset": record, "value": value,
            "delivered-at-s": seconds(when),
            "why": f"{what} next offset {offset} on key {key!r}, but the record at offset "
                   f"{record} (value {value!r}, sent by op {send}) had "
                   + ("never been delivered to the group" if when == INFINITY else
                      f"not been delivered yet (first delivered at {seconds(when)} s)")}


def commit_rewinds(group: Group) -> list[dict[str, Any]]:
    """An ok commit below an ok commit that completed before it was invoked; a final
    committed offset below an ok commit that completed before the read."""
    found = []
    for key, commits in _ok_commits(group).items():
        by_completion = sorted(commits, key=lambda c: c[0].complete)
        done = 0
        highest: tuple[Commit, int] | None = None
        for commit, offset in sorted(commits, key=lambda c: c[0].invoke):
            while done < len(by_completion) and \
                    by_completion[done][0].complete < commit.invoke:
                if highest is None or by_completion[done][1] > highest[1]:
                    highest = by_completion[done]
                done += 1
            if highest is not None and offset < highest[1]:
                found.append(_rewind_witness(group, key, highest, commit.op, offset,
                                             f"op {commit.op} committed"))
        for read in group.committed:
            before = [c for c in commits if c[0].complete < read.invoke]
            if not before:
                continue
            top = max(before, key=lambda c: c[1])
            offset = read.offsets.get(key)
            if offset is None or offset < top[1]:
                found.append(_rewind_witness(group, key, top, read.op, offset,
                                             f"the final committed read {read.op} shows"))
    return found


def _rewind_witness(group: Group, key: Key, earlier: tuple[Commit, int], op: int,
                    offset: int | None, what: str) -> dict[str, Any]:
    return {"group": group.name, "key": key, "ops": sorted({earlier[0].op, op}),
            "offsets": [earlier[1], offset],
            "why": f"{what} next offset {offset} on key {key!r} after op {earlier[0].op} "
                   f"had committed {earlier[1]}"}


# --- resumes -----------------------------------------------------------------------------------

def _first_fetches(group: Group) -> dict[tuple[Any, Key], tuple[list[int], list[Delivery]]]:
    """(process, key) -> its polls with records of the key, by completion time."""
    found: dict[tuple[Any, Key], list[Delivery]] = defaultdict(list)
    for delivery in group.deliveries:
        found[delivery.process, delivery.key].append(delivery)
    result = {}
    for pair, items in found.items():
        merged: dict[int, Delivery] = {}
        for item in sorted(items, key=lambda d: (d.time, d.op)):
            seen = merged.get(item.op)
            merged[item.op] = item if seen is None or \
                min(o for o, _ in item.records) < min(o for o, _ in seen.records) else seen
        ordered = sorted(merged.values(), key=lambda d: (d.time, d.op))
        result[pair] = ([d.time for d in ordered], ordered)
    return result


@dataclass(frozen=True)
class _KeyCommits:
    """A key's commits (ok or info): ok ones by completion with the running largest, and
    all by invocation."""

    completions: list[int]
    largest: list[tuple[Commit, int]]
    invokes: list[int]
    by_invoke: list[tuple[Commit, int]]

    @classmethod
    def of(cls, commits: Sequence[tuple[Commit, int]]) -> _KeyCommits:
        done = sorted((c for c in commits if c[0].status == "ok" and c[0].complete is not None),
                      key=lambda c: c[0].complete)
        largest: list[tuple[Commit, int]] = []
        for commit in done:
            largest.append(commit if not largest or commit[1] > largest[-1][1]
                           else largest[-1])
        by_invoke = sorted(commits, key=lambda c: c[0].invoke)
        return cls([c[0].complete for c in done], largest, [c[0].invoke for c in by_invoke],
                   by_invoke)

    def positions(self, at: int) -> tuple[tuple[Commit, int] | None, set[int | None]]:
        """The largest ok commit completed by `at`, and every next offset the committed
        offset may hold at `at`: that one's, and those of the commits invoked from its
        invocation up to `at` (in flight, of unknown outcome, or rewinding it)."""
        done = bisect_right(self.completions, at)
        committed = self.largest[done - 1] if done else None
        low = bisect_left(self.invokes, committed[0].invoke) if committed else 0
        high = bisect_right(self.invokes, at)
        possible: set[int | None] = {None if committed is None else committed[1]}
        possible.update(offset for _, offset in self.by_invoke[low:high])
        return committed, possible


def resumes(group: Group, log: Log) -> dict[str, list[dict[str, Any]]]:
    """Per ownership, the member's first fetch of the key against the committed offset at
    its assignment: `resume-skip` (starts after it), `resume-rewind` (before it)."""
    fetches = _first_fetches(group)
    by_key: dict[Key, list[tuple[Commit, int]]] = defaultdict(list)
    for commit in group.commits:
        if commit.status in ("ok", "info"):
            for key, offset in commit.offsets.items():
                by_key[key].append((commit, offset))
    commits = {key: _KeyCommits.of(items) for key, items in by_key.items()}
    empty = _KeyCommits.of([])
    found: dict[str, list[dict[str, Any]]] = {"resume-skip": [], "resume-rewind": []}
    for owned in group.ownerships:
        times, items = fetches.get((owned.process, owned.key), ([], []))
        at = bisect_left(times, owned.start)
        if at == len(items) or (owned.end is not None and times[at] > owned.end):
            continue
        fetch = items[at]
        first = min(o for o, _ in fetch.records)
        committed, possible = commits.get(owned.key, empty).positions(owned.start)
        expected = {log.first_at_or_after(owned.key, n) for n in possible}
        if first in expected:
            continue
        start = log.first_at_or_after(owned.key, None if committed is None else committed[1])
        kind = "resume-rewind" if start is None or first < start else "resume-skip"
        found[kind].append(_resume_witness(group, log, owned, fetch, first, committed, start))
    return found


def _resume_witness(group: Group, log: Log, owned: Ownership, fetch: Delivery, first: int,
                    committed: tuple[Commit, int] | None, start: int | None) -> dict[str, Any]:
    next_offset = None if committed is None else committed[1]
    ops = sorted({owned.start_op, fetch.op, *([committed[0].op] if committed else [])})
    witness = {"group": group.name, "key": owned.key, "ops": ops, "member": owned.process,
               "member-id": owned.member, "generation": owned.generation,
               "assigned-at-s": seconds(owned.start), "offset": first,
               "committed": next_offset, "expected-offset": start}
    position = "the beginning" if committed is None else f"committed offset {next_offset}"
    if start is not None and first > start:
        witness["skipped"] = log.count_between(owned.key, start, first)
    witness["why"] = (f"member {owned.process} was assigned key {owned.key!r} at "
                      f"{seconds(owned.start)} s with {position} (first record {start}) but "
                      f"its first poll of the key (op {fetch.op}) started at offset {first}")
    return witness


# --- deliveries --------------------------------------------------------------------------------

@dataclass
class Deliveries:
    """The group's deliveries against the log: distinct records delivered, all deliveries,
    the records never delivered, extra deliveries (key, offset, value) -> their ops, and
    fetched-but-unprocessed records."""

    delivered: int
    deliveries: int
    undelivered: list[dict[str, Any]]
    repeated: dict[tuple[Key, int, Any], list[Delivery]]
    unprocessed: int
    outside_ownership: int


def deliveries(group: Group, log: Log, history_end: int) -> Deliveries:
    counts: dict[tuple[Key, int, Any], list[Delivery]] = defaultdict(list)
    unprocessed: set[tuple[Key, int]] = set()
    total = 0
    for delivery in group.deliveries:
        if not delivery.processed:
            unprocessed.update((delivery.key, offset) for offset, _ in delivery.records)
            continue
        for offset, value in delivery.records:
            counts[delivery.key, offset, value].append(delivery)
            total += 1
    seen = {(key, offset) for key, offset, _ in counts}
    undelivered = []
    for key, records in log.records.items():
        for offset, (value, send) in sorted(records.items()):
            if (key, offset) not in seen:
                undelivered.append({"group": group.name, "key": key, "offset": offset,
                                    "value": value, "ops": [send],
                                    "fetched-unprocessed": (key, offset) in unprocessed,
                                    "why": f"no member of group {group.name} delivered "
                                           f"the record sent by op {send}"})
    repeated = {record: items for record, items in counts.items() if len(items) > 1}
    return Deliveries(len(counts), total, undelivered, repeated,
                      len(unprocessed - seen), _outside(group, history_end))


def _outside(group: Group, history_end: int) -> int:
    """Deliveries by a member that did not own the key at the poll's completion (zombies)."""
    spans: dict[tuple[Any, Key], list[tuple[int, int]]] = defaultdict(list)
    for owned in group.ownerships:
        spans[owned.process, owned.key].append((owned.start, _end(owned, history_end)))
    for items in spans.values():
        items.sort()
    outside = 0
    for delivery in group.deliveries:
        items = spans.get((delivery.process, delivery.key), [])
        at = bisect_right(items, (delivery.time, INFINITY)) - 1
        if at < 0 or items[at][1] < delivery.time:
            outside += delivery.processed
    return outside


@dataclass
class Charged:
    """Repeated deliveries charged to assignments: one row per assignment ({group, key,
    generation, member, member-id, time-s, op, duplicates}), how many had no preceding
    assignment, and per repeated record the assignment its first repeat is charged to."""

    rows: list[dict[str, Any]]
    unattributed: int
    first: dict[tuple[Key, int, Any], Ownership | None]


def attribute_duplicates(group: Group, repeated: Mapping[tuple[Key, int, Any], list[Delivery]]
                         ) -> Charged:
    """Each repeated delivery charged to the key's nearest preceding assignment in the
    group (the rebalance that made the record be delivered again)."""
    assignments: dict[Key, list[tuple[int, int, Ownership]]] = defaultdict(list)
    for owned in group.ownerships:
        assignments[owned.key].append((owned.start, owned.start_op, owned))
    starts: dict[Key, list[int]] = {}
    for key, items in assignments.items():
        items.sort(key=lambda a: (a[0], a[1]))
        starts[key] = [a[0] for a in items]
    charged: dict[int, tuple[Ownership, int]] = {}
    first: dict[tuple[Key, int, Any], Ownership | None] = {}
    unattributed = 0
    for record, items in repeated.items():
        key = record[0]
        first[record] = None
        for repeat, delivery in enumerate(sorted(items, key=lambda d: (d.time, d.op))[1:]):
            at = bisect_right(starts.get(key, []), delivery.time) - 1
            if at < 0:
                unattributed += 1
                continue
            owned = assignments[key][at][2]
            if repeat == 0:
                first[record] = owned
            charged[id(owned)] = (owned, charged.get(id(owned), (owned, 0))[1] + 1)
    rows = [_charge_row(group, owned, count) for owned, count in charged.values()]
    return Charged(sorted(rows, key=lambda r: (r["time-s"], repr(r["key"]))), unattributed,
                   first)


def _charge_row(group: Group, owned: Ownership, count: int | None = None) -> dict[str, Any]:
    row = {"group": group.name, "key": owned.key, "generation": owned.generation,
           "member": owned.process, "member-id": owned.member,
           "time-s": seconds(owned.start), "op": owned.start_op}
    if count is not None:
        row["duplicates"] = count
    return row


def repeated_witness(group: Group, record: tuple[Key, int, Any], items: Sequence[Delivery],
                     rebalance: Ownership | None) -> dict[str, Any]:
    """A record delivered more than once, with the assignment its repeat is charged to."""
    key, offset, value = record
    shown = sorted(items, key=lambda d: (d.time, d.op))
    return {"group": group.name, "key": key, "offset": offset, "value": value,
            "ops": sorted({d.op for d in shown[:SHOWN_OPS]}),
            "members": list(dict.fromkeys(d.process for d in shown)),
            "deliveries": len(shown),
            "rebalance": None if rebalance is None else _charge_row(group, rebalance),
            "why": f"group {group.name} delivered the record {len(shown)} times"}
