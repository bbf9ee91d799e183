"""The verdict of a composed checker result as terminal lines (`kchaos run`, `check`, ...)."""

from __future__ import annotations

from checker.checkers import Result

__all__ = ["VERDICTS", "summary_lines"]

VERDICTS = {True: "VALID", False: "INVALID", "unknown": "UNKNOWN"}


def summary_lines(results: Result) -> list[str]:
    """"kchaos: VERDICT", then a line per checker: verdict, anomalies, what was allowed."""
    lines = [f"kchaos: {VERDICTS.get(results.valid, 'UNKNOWN')}"]
    for name, checker in results.checkers.items():
        found = ", ".join(f"{kind} {a.count}" for kind, a in checker.anomalies.items())
        allowed = (f"  (allowed by the configuration: {', '.join(checker.allowed)})"
                   if checker.allowed else "")
        error = f"  error: {checker.error}" if checker.error else ""
        lines.append(f"  {name:<15} {str(checker.valid):<8} {found or 'no anomalies'}"
                     f"{allowed}{error}")
    return lines
