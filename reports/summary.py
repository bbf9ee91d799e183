"""What a run's results say, in words: its state, one headline for the report's banner, the
terminal and `results.json` ("summary"), and the terminal's line per checker. Anomalies
that were found are always named, also when the configuration allows them, and so are the
asked faults that took effect and those that never did.

A run's state (`run_state`, results.json's "state" beside Jepsen's "valid") is one of:

- `valid`: no anomalies, and a fault took effect when faults were asked;
- `allowed`: valid, but with anomalies the configuration allows (unclean elections, say);
- `invalid`: anomalies the configuration does not allow;
- `unknown`: a checker could not decide;
- `inconclusive`: valid, but faults were asked and not one took effect (the `faults`
  checker's stats), so the run did not test what it was asked to.

Each has its own word (`STATE_WORDS`) and colour (`STATE_COLOURS`, ANSI for the terminal;
the HTML pages use the CSS classes `state-<state>`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from checker.core import Result
from checker.faults import recorded_fault_stats

__all__ = ["STATES", "STATE_COLOURS", "STATE_WORDS", "VERDICTS", "coloured", "faults_clause",
           "headline", "run_state", "summary_lines"]

STATES = ("valid", "allowed", "invalid", "unknown", "inconclusive")
STATE_WORDS = {"valid": "VALID", "allowed": "ALLOWED", "invalid": "INVALID",
               "unknown": "UNKNOWN", "inconclusive": "INCONCLUSIVE"}
# ANSI SGR codes: green, cyan, red, yellow, magenta.
STATE_COLOURS = {"valid": "32", "allowed": "36", "invalid": "31", "unknown": "33",
                 "inconclusive": "35"}
VERDICTS = {True: "VALID", False: "INVALID", "unknown": "UNKNOWN"}
# The acks checker's names for acknowledged writes that were lost (the same writes the queue
# checker reports as lost-write): told once, as a count of writes.
ACKED_LOSSES = frozenset({"lost-acknowledged", "lost-allowed-by-configuration"})
# How many asked faults a headline names before it counts the rest.
NAMED_FAULTS = 4


def run_state(results: Mapping[str, Any] | None) -> str | None:
    """The run's state from results.json's body (see the module docstring); None when the
    checkers did not run."""
    if not isinstance(results, Mapping) or "valid" not in results:
        return None
    valid = results["valid"]
    if valid is False:
        return "invalid"
    if valid is not True:
        return "unknown"
    checkers = _checkers(results)
    if _allowed(checkers):
        return "allowed"
    faults = recorded_fault_stats(checkers)
    if faults is not None and faults["asked"] and not any(
            faults["took_effect"].get(name) for name in faults["asked"]):
        return "inconclusive"
    return "valid"


def headline(results: Mapping[str, Any] | None) -> str:
    """The state and why, from results.json's body (None: the checkers did not run)."""
    state = run_state(results)
    if results is None or state is None:
        return "NO VERDICT: the checkers did not run (no results.json)"
    checkers = _checkers(results)
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
    faults = faults_clause(results)
    tail = f"; {faults}" if faults else ""
    if state == "valid":
        return f"VALID: no anomalies found{tail}"
    if state == "inconclusive":
        return f"INCONCLUSIVE: no asked fault took effect, so nothing was tested{tail}"
    if state == "allowed":
        return f"ALLOWED: {_with_reasons(allowed, because)}{tail}"
    if state == "invalid":
        extra = f" (and allowed: {_counts(allowed)})" if allowed else ""
        found = _counts(failing) or "failed: " + ", ".join(
            name for name, body in checkers.items() if body.get("valid") is False)
        return f"INVALID: {found}{extra}{tail}"
    undecided = [f"{name} ({body.get('error') or 'undecided'})" for name, body in
                 checkers.items() if body.get("valid") not in (True, False)]
    return f"UNKNOWN: {', '.join(undecided) or 'a checker'} could not decide{tail}"


def faults_clause(results: Mapping[str, Any]) -> str:
    """"faults: isolate-coordinator 1, kill 3 took effect; never: pause-consumers": the
    asked faults that took effect, how often, and those that never did ("" when no fault
    was asked, or the run has no `faults` checker)."""
    faults = recorded_fault_stats(_checkers(results))
    if faults is None or not faults["asked"]:
        return ""
    took = [f"{name} {faults['took_effect'][name]}" for name in faults["asked"]
            if faults["took_effect"].get(name)]
    never = list(faults["never"])
    if len(never) > NAMED_FAULTS:
        never = [*never[:NAMED_FAULTS], f"{len(never) - NAMED_FAULTS} more"]
    parts = [f"{', '.join(took) or 'none'} took effect"]
    if never:
        parts.append(f"never: {', '.join(never)}")
    return "faults: " + "; ".join(parts)


def coloured(state: str | None, text: str) -> str:
    """`text` in the state's ANSI colour (for a terminal)."""
    code = STATE_COLOURS.get(state or "")
    return f"\033[{code}m{text}\033[0m" if code else text


def _checkers(results: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {name: body for name, body in (results.get("checkers") or {}).items()
            if isinstance(body, Mapping)}


def _allowed(checkers: Mapping[str, Mapping[str, Any]]) -> bool:
    """Whether a checker found anomalies of a type the configuration allows."""
    return any(kind in set(body.get("allowed") or [])
               for body in checkers.values() for kind in body.get("anomalies") or {})


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


def summary_lines(results: Result, colour: bool = False) -> list[str]:
    """"kchaos: <headline>" (in its state's colour with `colour`), then a line per checker:
    verdict, anomalies, what was allowed."""
    body = results.to_json()
    text = headline(body)
    lines = [f"kchaos: {coloured(run_state(body), text) if colour else text}"]
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
