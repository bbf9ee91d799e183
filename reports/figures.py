"""A night's figures as a Markdown page for docs/results/ (`kchaos nightly-report`).

It reads the night's state (`night.json`, as reports.night does) as plain data and
writes where the figures came from (the night, its plan, when it ran, the machine and
the kchaos commit, the command that wrote the page), the night's verdict, the detection
cells (seeds found of n, median time to first anomaly) and the valid cells (runs valid
of n, median ops/s and availability). Nothing on the page is typed by hand: run the
command again on another night to replace it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from reports.night import COMPARISON_HEADER, comparisons, describe_expectation, detects

__all__ = ["describe_machine", "describe_source", "night_markdown"]


def describe_machine(machine: Mapping[str, Any] | None) -> str:
    """`2 cores (AMD EPYC 7B13), 7.8 GiB, Linux 6.1.0-27-amd64`, from harness.provenance's
    facts; `not recorded` without them."""
    if not machine:
        return "not recorded"
    cpus = machine.get("cpus")
    text = f"{cpus} cores" if cpus else "? cores"
    if machine.get("cpu_model"):
        text += f" ({machine['cpu_model']})"
    memory = machine.get("memory_bytes")
    text += f", {memory / 2**30:.1f} GiB" if isinstance(memory, int) else ", ? GiB"
    return text + f", Linux {machine.get('kernel') or '?'}"


def describe_source(source: Mapping[str, Any] | None) -> str:
    """The commit's first 12 digits, `+ uncommitted changes` when the tree differed."""
    if not source or not source.get("commit"):
        return "not recorded"
    return f"`{source['commit'][:12]}`" + (" + uncommitted changes" if source.get("dirty")
                                           else "")


def _cell_text(text: Any) -> str:
    """A table cell's text: pipes escaped, one line."""
    return str(text).replace("|", "\\|").replace("\n", " ")


def _number(value: Any, unit: str = "", digits: int = 1) -> str:
    if not isinstance(value, int | float) or isinstance(value, bool):
        return "-"
    return f"{value:.{digits}f}{unit}"


def _percent(value: Any) -> str:
    return "-" if not isinstance(value, int | float) else f"{value:.1%}"


def _setting(value: Any) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={_setting(v)}" for k, v in value.items())
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)


def _db(cell: Mapping[str, Any]) -> str:
    db = str(cell.get("db") or "?")
    version = (cell.get("options") or {}).get("kafka_version")
    return f"{db} {version}" if version else db


def _settings(cell: Mapping[str, Any], common: Mapping[str, Any]) -> str:
    """The cell's options but those every cell shares, as `key=value`, the nemesis first."""
    options = {key: value for key, value in (cell.get("options") or {}).items()
               if key != "kafka_version" and (key not in common or common[key] != value)}
    ordered = sorted(options.items(), key=lambda item: (item[0] != "nemesis", item[0]))
    return "; ".join(f"`{key}={_setting(value)}`" for key, value in ordered) or "-"


def _common(cells: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The options every cell has, with the same value."""
    if not cells:
        return {}
    first, *rest = [cell.get("options") or {} for cell in cells]
    return {key: value for key, value in first.items()
            if key != "kafka_version" and all(key in other and other[key] == value
                                                for other in rest)}


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell_text(cell) for cell in row) + " |" for row in rows]
    return lines


def _met(value: Any) -> str:
    return {True: "met", False: "**NOT MET**"}.get(value, "not checked")


def _row(cell: Mapping[str, Any], outcome: Mapping[str, Any], common: Mapping[str, Any],
         figures: Callable[[Mapping[str, Any]], list[str]]) -> list[str]:
    """A cell's table row: the cell, its db, own settings and expectation, its runs met of
    the conclusive ones, the inconclusive, the table's own `figures`, met or not."""
    return [cell.get("label") or cell["name"], _db(cell), _settings(cell, common),
            describe_expectation(cell.get("expect")),
            f"{outcome.get('runs_met', 0)}/{outcome.get('conclusive', 0)}",
            str(outcome.get("inconclusive", 0)), *figures(outcome), _met(outcome.get("met"))]


def night_markdown(state: Mapping[str, Any], command: str, night: str) -> str:
    """The page of the night whose state is `state` (its folder shown as `night`), saying
    that `command` wrote it."""
    cells = list(state.get("cells") or [])
    outcomes = state.get("outcomes") or {}
    runs = state.get("runs") or []
    plan = (state.get("plan") or {}).get("name", "?")
    met = sum(1 for cell in cells if (outcomes.get(cell["name"]) or {}).get("met"))
    minutes = state.get("elapsed_seconds")
    common = _common(cells)
    lines = [
        f"# Nightly results: {plan}", "",
        f"<!-- Generated by `{command}`; edits are overwritten. -->", "",
        f"Written by `{command}`, nothing typed by hand.", "",
        f"- night: `{night}`, plan `{plan}`: {len(cells)} cells, {len(runs)} runs",
        f"- started: {state.get('started', '?')}"
        + (f", runs took {minutes / 60:.0f} minutes" if isinstance(minutes, int | float)
           else ""),
        f"- machine: {describe_machine(state.get('machine'))}",
        f"- kchaos commit: {describe_source(state.get('source'))}",
        f"- every cell: {_settings({'options': common}, {}) if common else '-'}",
        f"- verdict: **{met} of {len(cells)} cells met**", "",
    ]
    detection = [cell for cell in cells if detects(cell.get("expect"))]
    valid = [cell for cell in cells if not detects(cell.get("expect"))]
    if detection:
        rows = [_row(cell, outcomes.get(cell["name"]) or {}, common,
                     lambda outcome: [_number(outcome.get("median_detection_s"), " s"),
                                      _number(outcome.get("max_detection_s"), " s")])
                for cell in detection]
        lines += ["## Detection cells", "",
                  "A seed found the anomaly when its conclusive run (every fault the cell "
                  "needs took effect) reported every expected type; time to detection runs "
                  "from the start of the fault episode that caused the anomaly to the first "
                  "op that reveals it, over the seeds that found it.", ""]
        lines += _table(["cell", "db", "settings", "expectation", "found / conclusive",
                         "inconclusive", "median detection", "max detection", "outcome"],
                        rows)
        lines.append("")
    if valid:
        rows = [_row(cell, outcomes.get(cell["name"]) or {}, common,
                     lambda outcome: [_number(outcome.get("median_ops_per_s")),
                                      _percent(outcome.get("median_availability"))])
                for cell in valid]
        lines += ["## Valid cells", ""]
        lines += _table(["cell", "db", "settings", "expectation", "valid / conclusive",
                         "inconclusive", "median ops/s", "median availability", "outcome"], rows)
        lines.append("")
    for name, rows in comparisons(state).items():
        lines += [f"## Side by side: {name}", "",
                  "One schedule on each cell's configuration: the anomalies its runs found, "
                  "the median over its runs of how long a workload partition had no leader "
                  "after a failover (from the controller event logs), of the seconds of the "
                  "run without an acknowledged write, and of the ops/s.", ""]
        lines += _table(COMPARISON_HEADER, rows)
        lines.append("")
    missed = [(cell["name"], (outcomes.get(cell["name"]) or {}).get("reason", ""))
              for cell in cells if not (outcomes.get(cell["name"]) or {}).get("met")]
    if missed:
        lines += ["## Cells not met", ""]
        lines += [f"- `{name}`: {reason or 'not checked'}" for name, reason in missed]
        lines.append("")
    return "\n".join(lines)
