"""Jepsen's Kafka queue anomalies, found key by key and judged by the test's settings.

The analysis is split by key, the same in the calling process (`analyse`) and on Spark
(`AnalysisCheckers`, a `KeyedChecker` that `checker.spark` distributes as any other):
`split_by_key` turns each history op into per-key events and resets
(`checker.queue.events.events_of`) and names, from every key's events, the transactions of
unknown outcome (info) that a poll proves committed (`checker.queue.events.proven_sends`: it
read a value they sent, at any key); `analyse_part` runs `checker.queue.finders.analyse_key`,
one finder per anomaly on one key's log (the anomalies are listed there), and extracts its
dependency edges for `checker.txn.checker`; `fold` merges the key reports into a
`QueueAnalysis`. Only a `txn` op is atomic: a `send` op's micro-ops
are separate produce requests that may partly succeed, so an unknown-outcome send
micro-op is committed only if its own value was read. A committed info send counts as
an ok one, with the offset its completion gives, if any.

`QueueChecker` judges the analysis against `allowed_anomalies(test)`, and reports
`empty-history` when no send was acknowledged. Test keys read: `acks` (0, 1,
"all"/-1; default "all"), `broker_config` ("min.insync.replicas", default 1;
"unclean.leader.election.enable", default false), `subscribe` (true when consumers
subscribe rather than assign), `idempotence` (false: the producer may duplicate on
retry), `final_reads` (default true: the history ends with reads draining every key),
`isolation_level` (default "read_committed"; at "read_uncommitted" consumers read records
of open and aborted transactions: G1a and precommitted-read are allowed, and a read of one
value of an unknown-outcome transaction no longer proves its other sends committed, so
those are not counted lost), `db` and its options (the metadata mode, `checker.modes`:
what an unclean election means).
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from array import array
from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from checker.allowed import ALLOWED_BECAUSE, because
from checker.core import Anomaly, Memo, Result, check_by_key, compose_results, condense, safely
from checker.history import HistoryError, Op
from checker.modes import mode_of
from checker.queue.events import END, RESET, Event, Key, events_of, proven_sends
from checker.queue.finders import KeyReport, QueueBudget, analyse_key

__all__ = [
    "ANOMALIES",
    "AnalysisChecker",
    "AnalysisCheckers",
    "KEY_TXN_ANOMALIES",
    "KeyPart",
    "QueueAnalysis",
    "QueueChecker",
    "acks_label",
    "allowed_anomalies",
    "analyse",
    "analyse_part",
    "broker_setting",
    "check_analysis_safe",
    "flag",
    "fold",
    "judged",
    "loss_because",
    "loss_settings",
    "promises_no_loss",
    "reads_uncommitted",
    "split_by_key",
    "tolerance_reasons",
]

# What a truncated log shows, allowed where the configuration does not promise against loss:
# lost and unseen writes, and offsets going backwards under producers and consumers.
TRUNCATION = frozenset({"lost-write", "unseen", "inconsistent-offsets", "nonmonotonic-send",
                        "nonmonotonic-poll", "poll-skip"})
ANOMALIES = (
    "lost-write", "unseen", "duplicate", "inconsistent-offsets", "G1a", "precommitted-read",
    "poll-skip", "nonmonotonic-poll", "int-poll-skip", "int-nonmonotonic-poll",
    "nonmonotonic-send", "int-send-skip", "int-nonmonotonic-send", "empty-history",
)
# Found key by key with the others, but judged by `checker.txn.checker.TxnChecker`.
KEY_TXN_ANOMALIES = ("G1b",)
# The setting that lets a replica outside the ISR become leader, as a reason names it.
UNCLEAN_ELECTION = "unclean.leader.election.enable=true"
# Normal in Kafka's transaction model, as in Jepsen: producers interleave their sends.
ALWAYS_ALLOWED = frozenset({"int-send-skip"})
# What consumers at isolation.level=read_uncommitted are allowed to see.
UNCOMMITTED_READS = frozenset({"G1a", "precommitted-read"})


def acks_label(acks: Any, default: Any = "all") -> str:
    """"0", "1" or "all" for any spelling of a producer acks setting (None: the default)."""
    if acks is None:
        acks = default
    text = str(acks).strip().lower()
    if text in ("all", "-1"):
        return "all"
    if text in ("0", "1"):
        return text
    raise ValueError(f"unknown acks setting {acks!r} (expected 0, 1, all or -1)")


def broker_setting(test: Mapping[str, Any], name: str, default: Any) -> Any:
    return (test.get("broker_config") or {}).get(name, default)


def reads_uncommitted(test: Mapping[str, Any]) -> bool:
    """Whether the test's consumers read at isolation.level=read_uncommitted."""
    return test.get("isolation_level", "read_committed") == "read_uncommitted"


def flag(value: Any) -> bool:
    """A Kafka boolean setting: true, or the string "true" in any case."""
    return value is True or str(value).strip().lower() == "true"


def promises_no_loss(test: Mapping[str, Any], acks: Any = None) -> bool:
    """acks=all, min.insync.replicas >= 2 and unclean election off promise no acked loss."""
    level = acks_label(acks if acks is not None else test.get("acks"))
    min_isr = int(broker_setting(test, "min.insync.replicas", 1))
    unclean = flag(broker_setting(test, "unclean.leader.election.enable", False))
    return level == "all" and min_isr >= 2 and not unclean


def loss_settings(test: Mapping[str, Any]) -> list[str]:
    """The settings of `test` that let an acknowledged write be lost: acks below all,
    min.insync.replicas below 2, unclean elections on (none: it promises no loss)."""
    settings = []
    level = acks_label(test.get("acks"))
    if level != "all":
        settings.append(f"acks={level}")
    min_isr = int(broker_setting(test, "min.insync.replicas", 1))
    if min_isr < 2:
        settings.append(f"min.insync.replicas={min_isr}")
    if flag(broker_setting(test, "unclean.leader.election.enable", False)):
        settings.append(UNCLEAN_ELECTION)
    return settings


def loss_because(test: Mapping[str, Any], kind: str) -> str:
    """Why `test` allows `kind`, which a truncated log shows: when unclean elections are
    the only setting that lets a write be lost, an unclean election's reason in the test's
    metadata mode; else lost-write's, with the settings."""
    settings = loss_settings(test)
    if settings == [UNCLEAN_ELECTION]:
        return because(kind, cause="unclean-election-loss", mode=mode_of(test))
    return because(kind, *settings, cause="lost-write")


def tolerance_reasons(test: Mapping[str, Any], kinds: Iterable[str]) -> dict[str, str]:
    """Why this test allows each anomaly type of `kinds` (`checker.allowed.because`), with
    the settings that allow it."""
    reasons = {}
    for kind in sorted(kinds):
        if kind in ("poll-skip", "nonmonotonic-poll") and test.get("subscribe"):
            reasons[kind] = because(kind)
        elif kind == "unseen" and test.get("final_reads") is False:
            reasons[kind] = because(kind, cause="undelivered")
        elif kind in TRUNCATION:
            reasons[kind] = loss_because(test, kind)
        elif kind in ALLOWED_BECAUSE:
            reasons[kind] = because(kind)
    return reasons


def allowed_anomalies(test: Mapping[str, Any]) -> frozenset[str]:
    """The anomaly types this test's configuration tolerates (reported, not failures)."""
    allowed: set[str] = set(ALWAYS_ALLOWED)
    if test.get("subscribe"):
        allowed |= {"poll-skip", "nonmonotonic-poll"}
    if not promises_no_loss(test):
        allowed |= TRUNCATION
    if test.get("idempotence") is False:
        allowed.add("duplicate")
    if test.get("final_reads") is False:
        allowed.add("unseen")
    if reads_uncommitted(test):
        allowed |= UNCOMMITTED_READS
    return frozenset(allowed)


@dataclass
class QueueAnalysis:
    """Every key's findings merged: anomaly counts and witnesses, losses (each a dict with
    kind, witness, status, invoke, time, acks, node and key), acks counts by raw acks
    value, unseen sends over time ([[second, count], ...]), stats, and each key's
    dependency edges as (key, flat edges, edge values) for `checker.txn.checker`."""

    anomalies: dict[str, Anomaly]
    losses: list[dict[str, Any]]
    acks: dict[Any, dict[str, int]]
    unseen_over_time: list[list[int]]
    stats: dict[str, Any]
    seconds: float = 0.0
    unknown: list[str] = field(default_factory=list)
    edges: list[tuple[Key, array, list[tuple[Any, Any]]]] = field(default_factory=list)


def fold(reports: Iterable[KeyReport]) -> QueueAnalysis:
    """Merge key reports."""
    reports = sorted(reports, key=lambda r: repr(r.key))
    counts: dict[str, int] = defaultdict(int)
    examples: dict[str, list[dict[str, Any]]] = defaultdict(list)
    losses: list[dict[str, Any]] = []
    deltas: dict[int, int] = defaultdict(int)
    acks: dict[Any, dict[str, int]] = {}
    edges: list[tuple[Key, array, list[tuple[Any, Any]]]] = []
    stats: dict[str, Any] = {"keys": len(reports), "sends": 0, "reads": 0,
                             "reads-without-send": 0}
    for report in reports:
        for kind, count in report.counts.items():
            counts[kind] += count
            examples[kind].extend(report.examples[kind])
        for loss in report.losses:
            losses.append({**loss, "key": report.key})
        for second, delta in report.unseen_deltas.items():
            deltas[second] += delta
        for level, level_counts in report.acks.items():
            into = acks.setdefault(level, dict.fromkeys(level_counts, 0))
            for name, count in level_counts.items():
                into[name] += count
        for name in ("sends", "reads", "reads-without-send"):
            stats[name] += report.stats.get(name, 0)
        if report.edges:
            edges.append((report.key, report.edges, report.edge_values))
    anomalies = {}
    for kind in (*ANOMALIES, *KEY_TXN_ANOMALIES):
        if counts.get(kind):
            witnesses = sorted(examples[kind], key=lambda w: (w["ops"], repr(w["key"])))
            anomalies[kind] = condense(witnesses, counts[kind])
    series, running = [], 0
    for second in sorted(deltas):
        running += deltas[second]
        series.append([second, running])
    unknown = [report.unknown for report in reports if report.unknown]
    return QueueAnalysis(anomalies, losses, acks, series, stats, unknown=unknown, edges=edges)


Resets = dict[Any, list[tuple[int, tuple | None]]]  # process -> sorted (index, kept keys)


@dataclass(frozen=True)
class KeyPart:
    """What one key's analysis needs, picklable for an executor: the key's events, every
    process's resets, the info transactions that some key proves committed, the budget
    with the deadline of the whole analysis, and the key's end offset when the final
    drain asked the broker for it (`end`: the highest answered, and that op's index). A
    key over the budget of events carries only the reason (`over_budget`), not its
    events."""

    events: list[Event]
    resets: Resets
    proven: frozenset[int]
    budget: QueueBudget
    deadline: float
    over_budget: str | None = None
    end: tuple[int, int] | None = None

    def __len__(self) -> int:
        return len(self.events)


def split_by_key(history: Iterable[Op], source: str = "<history>",
                 budget: QueueBudget | None = None) -> list[tuple[Key, KeyPart]]:
    """Each key's part of the analysis, in key order: the history's ops as per-key events,
    and the info transactions proven committed by the keys within the budget. A malformed
    queue value raises HistoryError (`source`, the op's index + 1)."""
    by_key: dict[Key, list[Event]] = defaultdict(list)
    resets: Resets = defaultdict(list)
    ends: dict[Key, tuple[int, int]] = {}
    for op in history:
        try:
            events = events_of(op.index, op.time, op.type, op.process, op.f, op.value, op.extra)
        except ValueError as error:
            raise HistoryError(source, op.index + 1, str(error)) from None
        for key, event in events:
            if key == RESET:
                resets[event[1]].append((event[0], event[2]))
            elif event[1] == END:
                if key not in ends or event[4] > ends[key][0]:
                    ends[key] = (event[4], event[0])
            else:
                by_key[key].append(event)
    for items in resets.values():
        items.sort(key=lambda item: item[0])
    budget = budget or QueueBudget()
    deadline = budget.deadline()
    proven: set[int] = set()
    for events in by_key.values():
        if len(events) <= budget.key_events:
            proven |= proven_sends(events)
    shared = (dict(resets), frozenset(proven))
    parts = []
    for key in sorted(by_key, key=repr):
        too_many = budget.too_many(key, len(by_key[key]))
        events = [] if too_many else by_key[key]
        parts.append((key, KeyPart(events, *shared, budget, deadline, too_many,
                                   ends.get(key))))
    return parts


def analyse_part(key: Key, part: KeyPart) -> KeyReport:
    """One key's report (`checker.queue.finders.analyse_key`)."""
    if part.over_budget:
        return KeyReport(key, unknown=part.over_budget)
    return analyse_key(key, part.events, part.resets, part.budget, part.deadline, part.proven,
                       part.end)


def analyse(history: Iterable[Op], source: str = "<history>",
            budget: QueueBudget | None = None) -> QueueAnalysis:
    """The whole queue analysis of a history, in the calling process: split by key, every
    key analysed, the reports folded."""
    started = time.monotonic()
    analysis = fold(analyse_part(key, part)
                    for key, part in split_by_key(history, source, budget))
    analysis.seconds = time.monotonic() - started
    return analysis


def judged(test: Mapping[str, Any], analysis: QueueAnalysis) -> QueueAnalysis:
    """The analysis as this test can judge it: without final reads (`final_reads` false, e.g.
    an interrupted run), a write never read is `unseen`, not lost, however far other reads
    got; a write read and then overwritten stays lost. At read_uncommitted, an
    unknown-outcome write never read itself is no loss: the read of another value of its
    transaction that counted it committed may have been of an aborted record."""
    if reads_uncommitted(test):
        analysis = _without_losses(analysis, [
            loss for loss in analysis.losses
            if loss["status"] == "info" and "overwritten-by" not in loss["witness"]])
    if test.get("final_reads", True) is not False:
        return analysis
    moved = [loss for loss in analysis.losses
             if loss["kind"] == "lost-write" and "overwritten-by" not in loss["witness"]]
    if not moved:
        return analysis
    losses = [{**loss, "kind": "unseen"} if any(loss is m for m in moved) else loss
              for loss in analysis.losses]
    return _recounted(analysis, losses, {"lost-write": -len(moved), "unseen": len(moved)})


def _without_losses(analysis: QueueAnalysis, dropped: list[dict[str, Any]]) -> QueueAnalysis:
    if not dropped:
        return analysis
    gone = {id(loss) for loss in dropped}
    losses = [loss for loss in analysis.losses if id(loss) not in gone]
    change: dict[str, int] = {}
    for loss in dropped:
        change[loss["kind"]] = change.get(loss["kind"], 0) - 1
    return _recounted(analysis, losses, change)


def _recounted(analysis: QueueAnalysis, losses: list[dict[str, Any]],
               change: Mapping[str, int]) -> QueueAnalysis:
    """The analysis with `losses`, the counts of the loss kinds moved by `change`."""
    anomalies = dict(analysis.anomalies)
    for kind, delta in change.items():
        witnesses = sorted((loss["witness"] for loss in losses if loss["kind"] == kind),
                           key=lambda w: (w["ops"], repr(w["key"])))
        count = (anomalies[kind].count if kind in anomalies else 0) + delta
        if count:
            anomalies[kind] = condense(witnesses, count)
        else:
            anomalies.pop(kind, None)
    return replace(analysis, anomalies={k: anomalies[k] for k in (*ANOMALIES, *KEY_TXN_ANOMALIES)
                                        if k in anomalies}, losses=losses)


class AnalysisChecker(ABC):
    """A checker that works from the folded queue analysis (`QueueAnalysis`).

    `check` takes the analysis from the check's `Memo` (`opts["memo"]`, computed once for
    all the AnalysisCheckers composed), else computes it in the calling process, so an
    AnalysisChecker is also a Checker. On Spark, `AnalysisCheckers` checks them together.
    """

    @abstractmethod
    def check_analysis(self, test: Mapping[str, Any], analysis: QueueAnalysis,
                       opts: Mapping[str, Any]) -> Result: ...

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        memo = opts.get("memo") or Memo()
        analysis = memo.get("queue-analysis", lambda: analyse(
            history, budget=QueueBudget.of(test, opts)))
        if analysis.unknown:
            return Result("unknown", error="; ".join(analysis.unknown))
        return self.check_analysis(test, analysis, opts)


@dataclass(frozen=True)
class AnalysisCheckers:
    """Named AnalysisCheckers sharing one queue analysis, as one `KeyedChecker`
    (checker.core): `split` is `split_by_key`, `check_key` analyses one key (`analyse_part`),
    and `merge` folds the key reports and has every checker judge the analysis; its Result
    composes theirs under their names."""

    checkers: Mapping[str, AnalysisChecker]

    def split(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> list[tuple[Hashable, KeyPart]]:
        return split_by_key(history, budget=QueueBudget.of(test, opts))

    def check_key(self, test: Mapping[str, Any], key: Hashable, part: KeyPart,
                  opts: Mapping[str, Any]) -> KeyReport:
        return analyse_part(key, part)

    def merge(self, test: Mapping[str, Any], checked: Sequence[tuple[Hashable, KeyReport]],
              opts: Mapping[str, Any], seconds: float) -> Result:
        analysis = fold(report for _, report in checked)
        analysis.seconds = seconds
        return compose_results({name: check_analysis_safe(checker, test, analysis, opts)
                                for name, checker in self.checkers.items()}, seconds)

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        return check_by_key(self, test, history, opts)


def check_analysis_safe(checker: AnalysisChecker, test: Mapping[str, Any],
                        analysis: QueueAnalysis, opts: Mapping[str, Any]) -> Result:
    """Run an AnalysisChecker on an analysis; an analysis past its budget, or a crash, is an
    "unknown" result with the reason."""
    if analysis.unknown:
        return Result("unknown", error="; ".join(analysis.unknown))
    return safely(lambda: checker.check_analysis(test, analysis, opts))


class QueueChecker(AnalysisChecker):
    """Jepsen's Kafka queue anomalies; found anomalies fail unless the test allows them.
    A history in which no send was acknowledged tested nothing: `empty-history`."""

    anomaly_types: ClassVar[tuple[str, ...]] = ANOMALIES

    def check_analysis(self, test: Mapping[str, Any], analysis: QueueAnalysis,
                       opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        analysis = judged(test, analysis)
        anomalies = {kind: a for kind, a in analysis.anomalies.items() if kind in ANOMALIES}
        if not any(counts.get("acknowledged") for counts in analysis.acks.values()):
            anomalies["empty-history"] = condense([_nothing_acknowledged(analysis)])
        tolerated = allowed_anomalies(test)
        found = set(anomalies)
        stats = {**analysis.stats, "unseen-over-time": analysis.unseen_over_time,
                 "unseen-at-end": analysis.unseen_over_time[-1][1]
                 if analysis.unseen_over_time else 0,
                 "lost-writes": sorted(
                     ([loss["key"], loss["witness"].get("value"), loss["witness"].get("offset")]
                      for loss in analysis.losses if loss["kind"] == "lost-write"),
                     key=repr)}
        if found & tolerated:
            stats["allowed-because"] = tolerance_reasons(test, found & tolerated)
        return Result(
            valid=not (found - tolerated),
            anomalies=anomalies,
            stats=stats,
            allowed=sorted(found & tolerated),
            seconds=analysis.seconds + time.monotonic() - started,
        )


def _nothing_acknowledged(analysis: QueueAnalysis) -> dict[str, Any]:
    """The `empty-history` witness: what was sent, none of it acknowledged."""
    if not analysis.stats.get("sends") and not analysis.stats.get("reads"):
        return {"ops": [], "why": "no op sent or polled a record: the history tested nothing"}
    counts = {name: sum(c.get(name, 0) for c in analysis.acks.values())
              for name in ("attempted", "failed", "unknown")}
    return {"ops": [], **counts,
            "why": "no send was acknowledged: nothing was written that could be lost"}
