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
    because: list[str] = []
    for body in checkers.values():
        tolerated = set(body.get("allowed") or [])
        for kind, anomaly in (body.get("anomalies") or {}).items():
            count = anomaly.get("count", 0) if isinstance(anomaly, Mapping) else 0
            into = allowed if kind in tolerated else failing
            into[kind] = max(into.get(kind, 0), count)
        because += [r for r in (body.get("stats") or {}).get("allowed-because") or []
                    if r not in because]
    valid = results["valid"]
    if valid is True:
        if not allowed:
            return "VALID: no anomalies found"
        reason = f", allowed because {', '.join(because)}" if because else \
            ", allowed by this configuration"
        return f"VALID for this configuration: {_counts(allowed)}{reason}"
    if valid is False:
        extra = f" (and allowed: {_counts(allowed)})" if allowed else ""
        found = _counts(failing) or "failed: " + ", ".join(
            name for name, body in checkers.items() if body.get("valid") is False)
        return f"INVALID: {found}{extra}"
    undecided = [f"{name} ({body.get('error') or 'undecided'})" for name, body in
                 checkers.items() if body.get("valid") not in (True, False)]
    return f"UNKNOWN: {', '.join(undecided) or 'a checker'} could not decide"


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
                     f"{allowed}{_ok_of_invoked(checker.stats.get('by-f'))}{error}")
    return lines


def _ok_of_invoked(by_f: Any) -> str:
    """"  (send 72/97 ok, poll 86/86 ok)": the stats checker's counts, briefly."""
    if not isinstance(by_f, Mapping) or not by_f:
        return ""
    return "  (" + ", ".join(f"{f} {counts.get('ok', 0)}/{sum(counts.values())} ok"
                             for f, counts in by_f.items()) + ")"
