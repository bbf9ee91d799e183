"""The linearizability checker of the composition: each key of a queue history as a log.

`LinearizabilityChecker` is a `KeyedChecker` (checker.core). It routes the
history's ops (or their JSONL lines) to the keys of its model's `partition` (by
default `checker.lin.models.LOG`, one Kafka partition per key: P-compositionality);
each key's ops are then paired, placed by the model and searched with
`checker.lin.search` within the budget (on Spark, the keys in parallel, all of that
work on the executors), and it returns a `Result` (docs/checkers.md, "Results"):

  valid       false when a key is not linearizable; "unknown" when a key's search
              ran out of budget (the reasons in `error`), never a guess; else true
  anomalies   {"nonlinearizable": {"count": keys, "examples": one witness per key}};
              a witness names the key, `ops` (invoke indices: the stuck op first,
              then the ops that explain it), `stuck`, `operation` (the stuck op
              described), `value` and `offset` of a stuck send or `offsets`, `values`
              and `records` of a stuck poll (the first and last 4 of a long one),
              `problem` (when the op contradicts the key's log outright),
              `prefix-length` (the longest linearizable prefix found), `state` (the
              model state after it) and `pending` (ops open at that moment)
  stats       model, ops, keys, budget, configurations, and `partition_results`:
              every key's result in the JSON shape of `kchaos check-lin --json`,
              counterexamples included, which `reports/linearizability.py` renders
  allowed     ["nonlinearizable"] when the test does not promise a linearizable log

What the log model checks, per key (its reduction is explained in checker/lin/models.py):

- The key has one log of (offset, value) records whose offsets increase in append
  order; a value is appended at most once.
- An acknowledged send (ok with offset o) is appended at one instant between its
  invoke and its completion, at offset o, above every offset appended before: so
  above the offset of any send acknowledged, or any record polled, before it was
  invoked.
- A send of unknown outcome (info, never completed, or ok without an offset, as
  acks=0 reports) is appended at some instant after its invoke at some offset above
  those before, or never. A failed send is never appended.
- The records a poll returned for the key (if any) are, at one instant between its
  invoke and completion, consecutive records of the log: each there with that
  offset and value, in log order, no record between the first and the last left out.
- Not checked: where a poll starts (consumer positions move on assign), whether it
  returned everything up to the end, polls that returned nothing for the key, each
  process's own order of polls (`poll-skip` and `nonmonotonic-poll` are the queue
  checker's), and a `txn` op's atomicity (its micro-ops are checked one by one).

So it finds two values at one offset, one value at two offsets, reads of failed or
never-sent values, reads from the future, records skipped or reordered inside a
poll, acknowledged offsets going backwards in real time, and a poll contradicting
what an earlier one saw (a stale leader's log).

The test promises a linearizable log when it promises no acknowledged loss
(`checker.queue.analysis.promises_no_loss`: acks=all, min.insync.replicas >= 2, unclean
election off); otherwise a truncated log may hand a lost record's offset to another
value, and "nonlinearizable" is reported as allowed, as the queue checker does with
lost writes.

Budget, per key: the `budget` the checker was built with (default
`checker.lin.search.Budget()`: 60 s and 2,000,000 configurations), overridden
by the test's `linearizability_budget_seconds` and
`linearizability_budget_configurations`, overridden in turn by the same keys in
`opts`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from checker.allowed import because
from checker.core import Anomaly, Result, check_by_key, condense, merge_valid
from checker.history import Op, Operation, pair_operations, split_paired
from checker.lin.models import LOG, Model, Placed, Polled
from checker.lin.search import Budget, PartitionResult, check_partition, partitions_of
from checker.queue.analysis import promises_no_loss

__all__ = [
    "BUDGET_CONFIGURATIONS",
    "BUDGET_SECONDS",
    "NONLINEARIZABLE",
    "LinearizabilityChecker",
    "budget_of",
]

NONLINEARIZABLE = "nonlinearizable"
BUDGET_SECONDS = "linearizability_budget_seconds"
BUDGET_CONFIGURATIONS = "linearizability_budget_configurations"
PREFIX_TAIL = 3
RECORDS_SHOWN = 4

Partitions = list[tuple[Hashable, list[Op]]]
KeyVerdict = tuple[PartitionResult, dict[str, Any] | None]


def budget_of(test: Mapping[str, Any], opts: Mapping[str, Any], default: Budget) -> Budget:
    """The per-key budget: `default`, overridden by the test's keys, then by `opts`'."""
    seconds, configurations = default.seconds, default.max_configurations
    for source in (test, opts):
        if source.get(BUDGET_SECONDS) is not None:
            seconds = float(source[BUDGET_SECONDS])
        if source.get(BUDGET_CONFIGURATIONS) is not None:
            configurations = int(source[BUDGET_CONFIGURATIONS])
    if not seconds > 0 or configurations < 1:
        raise ValueError(f"linearizability budget must be positive, got {seconds} s and "
                         f"{configurations} configurations")
    return Budget(seconds, configurations)


@dataclass(frozen=True)
class LinearizabilityChecker:
    """Checks every key (partition of `model`) of a history for linearizability.

    A `KeyedChecker` (checker.core): `split` routes the history's items to the keys,
    `check_key` pairs, places and searches one key (with its witness, if it is not
    linearizable), `merge` judges them all, so `checker.spark` does each key's work on the
    executors in parallel."""

    anomaly_types: ClassVar[tuple[str, ...]] = (NONLINEARIZABLE,)

    model: Model = LOG
    budget: Budget = field(default_factory=Budget)

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        return check_by_key(self, test, history, opts)

    def split(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Partitions:
        """The history's ops that each partition of the model needs, by key: routed, not
        paired, so the keys' work is `check_key`'s."""
        budget_of(test, opts, self.budget)  # a bad budget fails before any key is searched
        parts = split_paired(history, self._keys_of(history))
        return sorted(parts.items(), key=lambda kv: repr(kv[0]))

    def _keys_of(self, history: Sequence[Op]
                 ) -> Callable[[Operation], Iterable[Hashable]]:
        """The keys of an operation: the model's `keys`, or else those its `partition`
        of the whole history gives the operation."""
        if self.model.partition is None:
            return lambda op: (None,)
        if self.model.keys is not None:
            return self.model.keys
        keys: dict[int, list[Hashable]] = defaultdict(list)
        for key, ops in partitions_of(self.model, pair_operations(history)).items():
            for op in ops:
                keys[op.invoke_index].append(key)
        return lambda op: keys.get(op.invoke_index, ())

    def check_key(self, test: Mapping[str, Any], key: Hashable, part: Sequence[Op],
                  opts: Mapping[str, Any]) -> KeyVerdict:
        """One key's ops paired and placed by the model, its search within the budget, and
        its witness if it is not linearizable."""
        operations = pair_operations(part)
        ops = partitions_of(self.model, operations).get(key, [])
        result = check_partition(self.model, ops, key=key,
                                 budget=budget_of(test, opts, self.budget))
        witness = (_witness(self.model, result, ops)
                   if result.valid is False and result.counterexample is not None else None)
        return result, witness

    def merge(self, test: Mapping[str, Any], checked: Sequence[tuple[Hashable, KeyVerdict]],
              opts: Mapping[str, Any], seconds: float) -> Result:
        """The Result of every key's verdict, in key order."""
        budget = budget_of(test, opts, self.budget)
        results = [result for _, (result, _) in checked]
        witnesses = [witness for _, (_, witness) in checked if witness is not None]
        unknown = [f"key {r.partition!r}: {r.reason}" for r in results if r.valid == "unknown"]
        anomalies: dict[str, Anomaly] = {}
        allowed: list[str] = []
        if witnesses:
            anomalies[NONLINEARIZABLE] = condense(witnesses)
            if not promises_no_loss(test):
                allowed.append(NONLINEARIZABLE)
        verdicts = [r.valid for r in results
                    if not (r.valid is False and NONLINEARIZABLE in allowed)]
        stats = {
            "model": self.model.name,
            "ops": sum(r.ops for r in results),
            "keys": len(results),
            "budget": {"seconds": budget.seconds, "configurations": budget.max_configurations},
            "configurations": sum(r.configurations for r in results),
            "partition_results": [r.to_json() for r in results],
        }
        if allowed:
            stats["allowed-because"] = {NONLINEARIZABLE: because(NONLINEARIZABLE)}
        return Result(merge_valid(verdicts), anomalies=anomalies, stats=stats, seconds=seconds,
                      allowed=allowed, error="; ".join(unknown) or None)


def _witness(model: Model, result: PartitionResult,
             ops: Sequence[Operation]) -> dict[str, Any]:
    example = result.counterexample
    assert example is not None
    [stuck] = example.stuck
    op = next((o for o in ops if o.invoke_index == stuck), None)
    found = op.output if op is not None else None
    witness: dict[str, Any] = {"key": result.partition}
    if isinstance(found, Placed):
        witness.update(value=op.input, offset=found.offset)
    elif isinstance(found, Polled):
        shown = found.records if len(found.records) <= 2 * RECORDS_SHOWN else (
            found.records[:RECORDS_SHOWN] + found.records[-RECORDS_SHOWN:])
        witness.update(offsets=[o for o, _ in shown], values=[v for _, v in shown],
                       records=len(found.records))
    related = found.related if isinstance(found, Placed | Polled) else ()
    witness["ops"] = [stuck, *sorted(set(related) - {stuck})]
    witness["stuck"] = stuck
    witness["operation"] = example.descriptions.get(stuck) or (
        model.describe_operation(op) if op is not None else None)
    if isinstance(found, Placed | Polled) and found.problem is not None:
        witness["problem"] = found.problem
    witness["prefix-length"] = len(example.prefix)
    witness["prefix-tail"] = example.prefix[-PREFIX_TAIL:]
    witness["state"] = example.state
    witness["pending"] = example.pending
    return witness
