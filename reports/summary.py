"""What a run's results say, in words: one headline for the report's banner, the terminal
and `results.json` ("summary"), and the terminal's line per checker. Anomalies that were
found are always named, also when the configuration allows them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checker.core import Result

__all__ = ["VERDICTS", "headline", "summary_lines"]

VERDICTS = {True: "VALID", False: "INVALID", "unknown": "UNKNOWN"}
# The acks checker's names for acknowledged writes that were lost (the same writes the queue
# checker reports as lost-write): told once, as a count of writes.
ACKED_LOSSES = frozenset({"lost-acknowledged", "lost-allowed-by-configuration"})


def headline(results: Mapping[str, Any] | None) -> str:
    """The verdict and why, from results.json's body (None: the checkers did not run)."""
    if not isinstance(results, Mapping) or "valid" not in results:
        return "NO VERDICT: the checkers did not run (no results.json)"
    checkers = {name: body for name, body in (results.get("checkers") or {}).items()
                if isinstance(body, Mapping)}
    failing: dict[str, int] = {}
    allowed: dict[str, int] = {}
    because: dict[str, str] = {}
    for body in checkers.values():
        tolerated = set(body.get("allowed") or [])
        for kind, anomaly in (body.get("anomalies") or {}).items():
            count = anomaly.get("count", 0) if isinstance(anomaly, Mapping) else 0
            into = allowed if kind in tolerated else failing
            into[kind] = max(into.get(kind, 0), count)
        reasons = (body.get("stats") or {}).get("allowed-because")
        if isinstance(reasons, Mapping):
            because.update(reasons)
    valid = results["valid"]
    if valid is True:
        if not allowed:
            return "VALID: no anomalies found"
        return f"VALID for this configuration: {_with_reasons(allowed, because)}"
    if valid is False:
        extra = f" (and allowed: {_counts(allowed)})" if allowed else ""
        found = _counts(failing) or "failed: " + ", ".join(
            name for name, body in checkers.items() if body.get("valid") is False)
        return f"INVALID: {found}{extra}"
    undecided = [f"{name} ({body.get('error') or 'undecided'})" for name, body in
                 checkers.items() if body.get("valid") not in (True, False)]
    return f"UNKNOWN: {', '.join(undecided) or 'a checker'} could not decide"


def _with_reasons(kinds: Mapping[str, int], because: Mapping[str, str]) -> str:
    """"G1c 16 (allowed: <reason>); ...": the allowed kinds counted, those allowed for one
    reason (`checker.allowed`) together."""
    by_reason: dict[str, dict[str, int]] = {}
    for kind, count in sorted(kinds.items()):
        by_reason.setdefault(because.get(kind, ""), {})[kind] = count
    return "; ".join(f"{_counts(counted)} (allowed: {reason})" if reason else
                     f"{_counts(counted)} (allowed by this configuration)"
                     for reason, counted in by_reason.items())


def _counts(kinds: Mapping[str, int]) -> str:
    """"259 acknowledged writes lost (lost-write 259, unseen 3)": the acks checker's count
    of lost acknowledged writes first, then every other kind."""
    acked = sum(count for kind, count in kinds.items() if kind in ACKED_LOSSES)
    rest = ", ".join(f"{kind} {count}" for kind, count in sorted(kinds.items())
                     if kind not in ACKED_LOSSES)
    if not acked:
        return rest
    lost = f"{acked} acknowledged write{'s' if acked != 1 else ''} lost"
    return f"{lost} ({rest})" if rest else lost


def summary_lines(results: Result) -> list[str]:
    """"kchaos: <headline>", then a line per checker: verdict, anomalies, what was allowed."""
    lines = [f"kchaos: {headline(results.to_json())}"]
    for name, checker in results.checkers.items():
        found = ", ".join(f"{kind} {a.count}" for kind, a in checker.anomalies.items())
        allowed = (f"  (allowed by the configuration: {', '.join(checker.allowed)})"
                   if checker.allowed else "")
        error = f"  error: {checker.error}" if checker.error else ""
        lines.append(f"  {name:<15} {str(checker.valid):<8} {found or 'no anomalies'}"
                     f"{allowed}{error}")
    return lines
