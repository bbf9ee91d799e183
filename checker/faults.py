"""The faults checker: which of the asked faults the nemesis invoked, and which took effect.

It judges the run, not the system: its verdict is always true, and a run's state
(`reports.summary.run_state`) calls a run in which a nemesis was asked and no asked fault
took effect "inconclusive". Its stats are

    {"asked": [names], "invoked": {name: n}, "took_effect": {name: n}, "never": [names]}

- A fault is named as the user asked for it: the nemesis ops' `fault` field (set by the
  schedule, e.g. "isolate-coordinator" for a `start-partition` to the coordinator), else
  their `f`.
- `asked` are the faults of the test's `nemesis` ("a,b,...", groups already expanded as
  test.json records them; "none" for none); without one (a bare history), the faults
  its nemesis ops name.
- An invocation is a nemesis op that starts a fault or is one by itself (not a stop such
  as `stop-partition` or `start`, not `heal`); the nemesis records it twice, when invoked
  and when done (an op of the same f right after completes it).
- It took effect when its completion did something (`checker.history.fault_took_effect`):
  not an error, "no-target", "not-started" or `{"skipped": reason}`.
- `invoked` and `took_effect` have every asked fault (0 when it never was) and any other
  fault the history shows; `never` the asked faults that never took effect, in asked order.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any, ClassVar

from checker.core import Result
from checker.history import FAULT_STOPS, HEAL, NEMESIS, Op, fault_took_effect

__all__ = ["FAULTS_CHECKER", "FaultsChecker", "asked_faults", "fault_invocations",
           "fault_stats", "recorded_fault_stats"]

FAULTS_CHECKER = "faults"  # its name in the registry and in results.json

STOP_FS = frozenset(FAULT_STOPS.values()) | {HEAL}


def asked_faults(test: Mapping[str, Any]) -> list[str] | None:
    """The faults the test asked for (empty for "none"); None when the test does not say."""
    nemesis = test.get("nemesis")
    if isinstance(nemesis, str):
        return [name for name in (part.strip() for part in nemesis.split(","))
                if name and name != "none"]
    if isinstance(nemesis, list | tuple):
        return [str(name) for name in nemesis if name != "none"]
    return None


def fault_invocations(history: Iterable[Op]) -> Iterator[tuple[str, Op, Op | None]]:
    """(fault name, invocation, completion or None) of every nemesis op that starts a
    fault or is one, in order."""
    pending: Op | None = None
    for op in history:
        if op.process != NEMESIS:
            continue
        if pending is not None and op.f == pending.f and op.type != "invoke":
            yield from _starting(pending, op)
            pending = None
            continue
        if pending is not None:
            yield from _starting(pending, None)
        pending = op
    if pending is not None:
        yield from _starting(pending, None)


def _starting(invocation: Op, completion: Op | None) -> Iterator[tuple[str, Op, Op | None]]:
    if invocation.f not in STOP_FS and not invocation.f.startswith("stop-"):
        yield str(invocation.extra.get("fault") or invocation.f), invocation, completion


def fault_stats(test: Mapping[str, Any], history: Iterable[Op]) -> dict[str, Any]:
    """The checker's stats (see the module docstring)."""
    invoked: dict[str, int] = {}
    took_effect: dict[str, int] = {}
    for name, _, completion in fault_invocations(history):
        invoked[name] = invoked.get(name, 0) + 1
        effective = completion is not None and fault_took_effect(completion.to_json())
        took_effect[name] = took_effect.get(name, 0) + int(effective)
    asked = asked_faults(test)
    if asked is None:
        asked = list(invoked)
    for name in asked:
        invoked.setdefault(name, 0)
        took_effect.setdefault(name, 0)
    return {"asked": asked, "invoked": invoked, "took_effect": took_effect,
            "never": [name for name in asked if not took_effect[name]]}


def recorded_fault_stats(checkers: Mapping[str, Any]) -> dict[str, Any] | None:
    """This checker's stats among recorded checker results (results.json's `checkers`),
    None when it did not run or they lack the shape above."""
    body = checkers.get(FAULTS_CHECKER)
    stats = body.get("stats") if isinstance(body, Mapping) else None
    if not isinstance(stats, Mapping) or not isinstance(stats.get("asked"), list) \
            or not isinstance(stats.get("took_effect"), Mapping) \
            or not isinstance(stats.get("never"), list):
        return None
    return dict(stats)


class FaultsChecker:
    """Counts the asked faults' invocations and those that took effect; always valid."""

    anomaly_types: ClassVar[tuple[str, ...]] = ()

    def check(self, test: Mapping[str, Any], history: Sequence[Op],
              opts: Mapping[str, Any]) -> Result:
        return Result(True, stats=fault_stats(test, history))
