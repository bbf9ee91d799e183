"""How often each kind of client op succeeded, and whether every kind ever did (Jepsen's
`stats` checker).

Counts, per `f` of the client ops (the nemesis's aside), how their invocations completed:
`ok`, `fail` or `info` (an invocation that never completed counts as `info`). A run in
which some kind of op it issued never succeeded did not test what it set out to: a queue
run whose sends all failed wrote nothing to lose, and its other checkers find nothing.

- invalid, `never-succeeded`: an f was invoked at least `MIN_INVOCATIONS` times and never
  completed ok. Witness: the f, its counts, the errors its completions gave (the most
  common first) and the first ops by index.
- unknown, too little to judge: the history has no client op, or an f that never
  completed ok was invoked fewer than `MIN_INVOCATIONS` times (a single op that timed out
  says little about the system).
- valid otherwise.

`crash` ops end their client process on purpose and complete `info` by design, and the
final drain asks for `end-offsets` once per client thread, an answer the other checkers
do without when none came: both are counted but not judged. Stats: `by-f` ({f: {ok,
fail, info}}), `never-succeeded` and `too-few` (the offending fs), `not-judged` (those
fs present), `min-invocations`.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, ClassVar

from checker.core import Result, Verdict, condense
from checker.history import NEMESIS, Op

__all__ = ["ANOMALIES", "MIN_INVOCATIONS", "OUTCOMES", "UNJUDGED", "StatsChecker"]

ANOMALIES = ("never-succeeded",)
# Fewer invocations than this of an f that never succeeded are too few to judge.
MIN_INVOCATIONS = 3
# Client fs not judged: a crash ends its process, completing info by design; the final
# drain's end-offsets are asked once per thread, and the checkers do without them.
UNJUDGED = frozenset({"crash", "end-offsets"})
OUTCOMES = ("ok", "fail", "info")
WITNESS_OPS = 10
WITNESS_ERRORS = 5


class _Tally:
    """One f's completions: counts by outcome, the errors given, the first ops."""

    def __init__(self) -> None:
        self.counts = dict.fromkeys(OUTCOMES, 0)
        self.errors: Counter[str] = Counter()
        self.ops: list[int] = []

    def add(self, outcome: str, index: int, error: Any) -> None:
        self.counts[outcome] += 1
        if error is not None:
            self.errors[" ".join(str(error).split())] += 1
        if len(self.ops) < WITNESS_OPS:
            self.ops.append(index)

    @property
    def invocations(self) -> int:
        return sum(self.counts.values())

    def witness(self, f: str) -> dict[str, Any]:
        return {"f": f, "invocations": self.invocations, **self.counts,
                "errors": dict(self.errors.most_common(WITNESS_ERRORS)), "ops": self.ops}


def _tallies(history: Sequence[Op]) -> dict[str, _Tally]:
    tallies: dict[str, _Tally] = {}
    open_invokes: dict[Hashable, Op] = {}
    for op in history:
        if op.process == NEMESIS:
            continue
        if op.type == "invoke":
            open_invokes[op.process] = op
            continue
        open_invokes.pop(op.process, None)
        tallies.setdefault(op.f, _Tally()).add(op.type, op.index, op.extra.get("error"))
    for op in open_invokes.values():
        tallies.setdefault(op.f, _Tally()).add("info", op.index, "never completed")
    return dict(sorted(tallies.items()))


class StatsChecker:
    """Every kind of client op succeeded at least once; see the module docstring."""

    anomaly_types: ClassVar[tuple[str, ...]] = ANOMALIES

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        tallies = _tallies(history)
        judged = {f: t for f, t in tallies.items() if f not in UNJUDGED}
        never = [f for f, t in judged.items()
                 if not t.counts["ok"] and t.invocations >= MIN_INVOCATIONS]
        few = [f for f, t in judged.items()
               if not t.counts["ok"] and t.invocations < MIN_INVOCATIONS]
        stats = {"by-f": {f: t.counts for f, t in tallies.items()},
                 "never-succeeded": never, "too-few": few,
                 "not-judged": [f for f in tallies if f in UNJUDGED],
                 "min-invocations": MIN_INVOCATIONS}
        anomalies = {"never-succeeded": condense([judged[f].witness(f) for f in never])} \
            if never else {}
        valid: Verdict = False if never else "unknown" if few or not judged else True
        error = None
        if valid == "unknown":
            error = (_too_few(few, judged) if few else
                     "too little to judge: no client op" + (
                         f" other than {', '.join(tallies)}" if tallies else ""))
        return Result(valid, anomalies, stats, time.monotonic() - started, error=error)


def _too_few(fs: Sequence[str], tallies: Mapping[str, _Tally]) -> str:
    told = ", ".join(f"{f} invoked {tallies[f].invocations}x" for f in fs)
    return (f"too little to judge: {told}, never ok; an f is judged from "
            f"{MIN_INVOCATIONS} invocations")
