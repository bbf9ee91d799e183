"""What a consumer group promises, checked on a history.

Applies to subscribe-mode histories (ops with a `group` field, `subscribe` or
`committed` ops, per the groups history contract); on any other history there is nothing
to check: the verdict is "unknown", with that reason, and the stats say the checker did
not apply. `checker.groups.membership` rebuilds each
group (members, ownership intervals, deliveries, commits, final committed offsets) and
the topic's log; `checker.groups.finders` finds the anomalies. Times are the clients'
(ns since the test started); a member is a process, live until its `info` completion
or an invoke of it that never completed.

The promised delivery follows the commit mode (`commit` in opts or the test):
after-process and auto promise at-least-once, before-process at-most-once. Without the
setting, the mode is inferred (polls with a `commit` field: before-process; commit ops:
after-process; else auto) and the stats say so.

Anomalies (each witness names its ops by index, the group, key, members, generations):

- `split-assignment`: two members own one key over a common time: member B is assigned
  k while member A's ownership of k (assigned ... revoked / lost / end of its process /
  end of the history) has not ended, unless A's revocation (or loss) carries the very
  generation that assigned k to B (one rebalance, its callbacks reported out of order).
  An unknown (null) generation on either side never excuses; under the consumer protocol
  of KIP-848 (`group_protocol` "consumer" in opts or the test) nothing does: its
  coordinator moves a partition only after the owner acknowledged the revocation, and the
  history's numbers are member epochs, each member's own. An ownership the client
  ended as lost (a zombie: removed while it could not tell, e.g. paused past its session
  timeout) splits nothing: the coordinator had already given the key away. Witness: both
  members, the generations, the overlap [from, to] in seconds.
- `orphaned-partition`: after the group's first assignment, a key (of the sends and polls,
  or opts["keys"]) that no member owns for longer than `orphan_bound_s`, time counted only
  while some member is live and polling (between its first and last ok poll) and no fault
  of the nemesis is in force (a fault may legitimately stall a group: its coordinator
  killed, its members cut off). The default bound, 2 x `session_timeout_ms` + 8 s (20 s for
  the default 6000 ms), is what a clean recovery may take: a session timeout to notice a
  dead member, another when the coordinator moved, then the join of an Empty group, which
  waits `group.initial.rebalance.delay.ms` (3 s) and its members' rejoins.
- `commit-skip` (at-least-once): an ok commit of next offset n on key k completed while an
  acknowledged record of k at an offset below n had not yet been delivered to the group
  (no member's ok poll had returned it by the commit's completion): the group will never
  deliver it. A final `committed` offset that no ok commit completed before the read
  reaches counts as a commit that completed by the read (auto-commit mode has no commit
  ops, only this).
- `commit-rewind`: an ok commit on k of a next offset below that of an ok commit that
  completed before it was invoked; or a final `committed` offset of k below (or null
  under) the largest ok commit that completed before the read.
- `resume-skip` / `resume-rewind`: the first poll by a member of a key it was assigned
  (completed inside its ownership; records fetched but left unprocessed count) starts
  after / before the first record at the group's committed offset at the assignment: the
  largest ok commit completed by then, or the beginning without one. Commits invoked
  from that commit's invocation up to the assignment (in flight, of unknown outcome, or
  rewinding it) may also be the committed offset: a resume at any of them is fine.
  Records polled by a member outside its ownership (a zombie) are no resume. Not checked
  in auto mode, whose committed offsets the history does not show.
- `undelivered` (at-least-once): an acknowledged record (an ok send, or an unknown-outcome
  send some poll read) that no member of the group ever delivered. Only polls of the
  group's members count, final drain included; assign-mode final reads do not. Records
  whose offset a poll saw holding another value (a truncated log: the queue checker's
  lost-write) are left out and counted (`overwritten`). Allowed when the test has no
  final reads (`final_reads` false).
- `double-delivery` (at-most-once): a record (key, offset, value) delivered to the group
  more than once.

Witnesses of `commit-rewind`, `resume-rewind` and `resume-skip` list the coordinator
faults of their group (`kill-coordinator`, `isolate-coordinator`) in force at some time
between their first and last op (`coordinator-faults`): the coordinator change the rewind
followed.

Allowed and counted instead: duplicates at at-least-once (each extra delivery charged to
the key's nearest preceding assignment: `duplicates_by_rebalance`), loss at at-most-once
(`lost`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

from checker.allowed import because
from checker.core import Anomaly, Result, condense
from checker.groups.finders import (
    attribute_duplicates,
    commit_rewinds,
    commit_skips,
    deliveries,
    orphaned_partitions,
    repeated_witness,
    resumes,
    split_assignments,
)
from checker.groups.membership import Group, GroupsHistory, read_groups, rebalances
from checker.history import Op, nemesis_periods

__all__ = ["ANOMALIES", "AT_LEAST_ONCE", "AT_MOST_ONCE", "GroupsChecker", "commit_mode",
           "orphan_bound_ns"]

ANOMALIES = ("split-assignment", "orphaned-partition", "commit-skip", "commit-rewind",
             "resume-skip", "resume-rewind", "undelivered", "double-delivery")
AT_LEAST_ONCE = "at-least-once"
AT_MOST_ONCE = "at-most-once"
PROMISES = {"after-process": AT_LEAST_ONCE, "auto": AT_LEAST_ONCE,
            "before-process": AT_MOST_ONCE}
DEFAULT_SESSION_TIMEOUT_MS = 6000
ORPHAN_SLACK_S = 8.0
NOTHING_TO_CHECK = "nothing to check: no consumer group in the history (assign mode)"


def _setting(test: Mapping[str, Any], opts: Mapping[str, Any], name: str,
             default: Any = None) -> Any:
    value = opts.get(name)
    return test.get(name, default) if value is None else value


def commit_mode(test: Mapping[str, Any], opts: Mapping[str, Any],
                history: GroupsHistory) -> tuple[str, bool]:
    """The commit mode, and whether it was inferred from the history."""
    mode = _setting(test, opts, "commit")
    if mode is not None:
        if mode not in PROMISES:
            raise ValueError(f"unknown commit mode {mode!r} (expected one of "
                             f"{', '.join(PROMISES)})")
        return mode, False
    commits = [c for g in history.groups.values() for c in g.commits]
    if any(c.source == "poll" for c in commits):
        return "before-process", True
    return ("after-process" if commits else "auto"), True


def orphan_bound_ns(test: Mapping[str, Any], opts: Mapping[str, Any]) -> int:
    bound = _setting(test, opts, "orphan_bound_s")
    if bound is None:
        timeout = _setting(test, opts, "session_timeout_ms", DEFAULT_SESSION_TIMEOUT_MS)
        bound = 2 * float(timeout) / 1000 + ORPHAN_SLACK_S
    return int(float(bound) * 1e9)


REWINDS = ("commit-rewind", "resume-rewind", "resume-skip")


def attribute_coordinator_faults(found: Mapping[str, list[dict[str, Any]]],
                                 history: Sequence[Op]) -> None:
    """Name in each rewind or skip witness the faults aimed at its group's coordinator
    (nemesis faults whose value names the group: kill-coordinator, isolate-coordinator)
    in force at some time between its first and last op: the coordinator change it
    followed (a commit an isolated coordinator acknowledged is lost when another takes
    over, so the fault may begin before the commit)."""
    periods = _coordinator_fault_periods(history)
    if not periods:
        return
    times = {op.index: op.time for op in history}
    for kind in REWINDS:
        for witness in found.get(kind, ()):
            ops = [times[i] for i in witness.get("ops", ()) if i in times]
            if not ops:
                continue
            low, high = min(ops), max(ops)
            witness["coordinator-faults"] = [
                {"op": op.index, "f": op.f, "from-s": round(start / 1e9, 3),
                 "to-s": None if end is None else round(end / 1e9, 3),
                 "target": {k: v for k, v in op.value.items() if k != "group"}}
                for op, start, end in periods
                if op.value["group"] == witness.get("group") and start <= high
                and (end is None or end >= low)]


def _coordinator_fault_periods(history: Sequence[Op]) -> list[tuple[Op, int, int | None]]:
    """(the nemesis op naming a group, its time, end) of each coordinator fault: it ends
    when the latest period of `nemesis_periods` its op falls in ends (its heal), or at
    once if none does."""
    periods = nemesis_periods(list(history))
    found = []
    for op in history:
        if op.process != "nemesis" or op.type == "invoke" or not (
                isinstance(op.value, dict) and "group" in op.value):
            continue
        period = max((p for p in periods if p.f == op.f and p.start <= op.time
                      and (p.end is None or op.time <= p.end)),
                     key=lambda p: p.start, default=None)
        found.append((op, op.time, op.time if period is None else period.end))
    return found


def _sorted(witnesses: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(witnesses, key=lambda w: (w["ops"], repr(w.get("key"))))


class GroupsChecker:
    """A consumer group's promises; see the module docstring."""

    anomaly_types: ClassVar[tuple[str, ...]] = ANOMALIES

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        groups = read_groups(history, _setting(test, opts, "keys", ()) or ())
        if not groups.groups:
            return Result("unknown", stats={"applicable": False}, error=NOTHING_TO_CHECK,
                          seconds=time.monotonic() - started)
        mode, inferred = commit_mode(test, opts, groups)
        promise = PROMISES[mode]
        bound = orphan_bound_ns(test, opts)
        found: dict[str, list[dict[str, Any]]] = {kind: [] for kind in ANOMALIES}
        stats: dict[str, Any] = {"applicable": True, "mode": promise, "commit": mode,
                                 "commit-inferred": inferred, "orphan-bound-s": bound / 1e9,
                                 "keys": len(groups.keys),
                                 "records": sum(map(len, groups.log.records.values())),
                                 "overwritten": sum(map(len, groups.log.overwritten.values())),
                                 "resume": "not checked: auto-commit offsets are not in the "
                                           "history" if mode == "auto" else "checked"}
        faults = [(p.start, groups.end if p.end is None else p.end)
                  for p in nemesis_periods(list(history)) if not p.instantaneous]
        protocol = _setting(test, opts, "group_protocol", "classic")
        stats["group-protocol"] = protocol
        per_group = {name: self._group(group, groups, promise, mode, bound, faults, found,
                                       protocol)
                     for name, group in sorted(groups.groups.items())}
        stats.update(_totals(per_group, promise))
        stats["groups"] = per_group
        attribute_coordinator_faults(found, history)
        anomalies: dict[str, Anomaly] = {kind: condense(_sorted(witnesses))
                                         for kind, witnesses in found.items() if witnesses}
        tolerated = {"undelivered"} if test.get("final_reads") is False else set()
        if set(anomalies) & tolerated:
            stats["allowed-because"] = {"undelivered": because("undelivered")}
        return Result(valid=not (set(anomalies) - tolerated), anomalies=anomalies, stats=stats,
                      allowed=sorted(set(anomalies) & tolerated),
                      seconds=time.monotonic() - started)

    def _group(self, group: Group, groups: GroupsHistory, promise: str, mode: str,
               bound: int, faults: Sequence[tuple[int, int]],
               found: dict[str, list[dict[str, Any]]], protocol: str) -> dict[str, Any]:
        log, end = groups.log, groups.end
        found["split-assignment"] += split_assignments(
            group, end, one_generation_excuses=protocol == "classic")
        found["orphaned-partition"] += orphaned_partitions(group, groups.keys, bound, end,
                                                           faults)
        found["commit-rewind"] += commit_rewinds(group)
        if promise == AT_LEAST_ONCE:
            found["commit-skip"] += commit_skips(group, log)
        if mode != "auto":
            for kind, witnesses in resumes(group, log).items():
                found[kind] += witnesses
        delivered = deliveries(group, log, end)
        charged = attribute_duplicates(group, delivered.repeated)
        duplicates = delivered.deliveries - delivered.delivered
        stats: dict[str, Any] = {
            "members": len({e.process for e in group.entries} |
                           {d.process for d in group.deliveries}),
            "rebalances": len(rebalances(group)),
            "generations": len({e.generation for e in group.entries
                                if e.generation is not None}),
            "delivered": delivered.delivered, "deliveries": delivered.deliveries,
            "duplicates": duplicates, "duplicates_by_rebalance": charged.rows,
            "duplicates_without_rebalance": charged.unattributed,
            "zombie-deliveries": delivered.outside_ownership,
            "commits": _commit_counts(group),
        }
        if promise == AT_LEAST_ONCE:
            found["undelivered"] += delivered.undelivered
            stats["undelivered"] = len(delivered.undelivered)
        else:
            found["double-delivery"] += [
                repeated_witness(group, record, items, charged.first[record])
                for record, items in delivered.repeated.items()]
            stats["lost"] = len(delivered.undelivered)
            stats["fetched-unprocessed"] = delivered.unprocessed
        return stats


def _commit_counts(group: Group) -> dict[str, int]:
    counts = {"ok": 0, "fail": 0, "info": 0}
    for commit in group.commits:
        status = commit.status if commit.complete is not None else "info"
        counts[status if status in counts else "info"] += 1
    return counts


def _totals(per_group: Mapping[str, Mapping[str, Any]], promise: str) -> dict[str, Any]:
    totals: dict[str, Any] = {
        name: sum(g[name] for g in per_group.values())
        for name in ("delivered", "deliveries", "duplicates", "rebalances",
                     *(("undelivered",) if promise == AT_LEAST_ONCE else ("lost",)))}
    totals["generations"] = {name: g["generations"] for name, g in per_group.items()}
    totals["duplicates_by_rebalance"] = [row for g in per_group.values()
                                         for row in g["duplicates_by_rebalance"]]
    return totals
