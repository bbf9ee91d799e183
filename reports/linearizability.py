"""Linearizability counterexamples: a timeline of the ops around the failure.

Counterexamples come from results.json alone: any checker whose stats hold
partition results in the JSON shape of `kchaos check-lin --json`, either
`partition_results` (the linearizability checker of the composition,
`checker.lin.checker`) or `files[].partition_results`. For each invalid
partition the section shows the longest linearizable prefix, the op that cannot
be linearized and the model state there, and an SVG timeline of the last ops of
the prefix, the stuck op and the ops pending with it: one row per client, one
bar per op.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from reports.html import Markup, element, facts, join, table
from reports.plots import Span

__all__ = ["counterexamples", "render_counterexamples"]

PREFIX_SHOWN = 10
WIDTH = 1100
LABEL = 110
ROW = 28
ROLE_COLORS = {"linearized": "#8fd19e", "stuck": "#e05a4f", "pending": "#f6c165"}


def _partition_results(body: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    if not isinstance(body, Mapping):
        return
    for file_result in body.get("files") or []:
        for partition in file_result.get("partition_results") or []:
            yield str(file_result.get("file") or ""), partition
    for partition in body.get("partition_results") or []:
        yield "", partition


def counterexamples(results: Mapping[str, Any] | None) -> list[tuple[str, dict[str, Any]]]:
    """(history file, partition result) of every invalid partition with a counterexample
    in the results (results.json)."""
    found = []
    for checker in ((results or {}).get("checkers") or {}).values():
        if isinstance(checker, Mapping):
            found += list(_partition_results(checker.get("stats")))
    return [(f, p) for f, p in found
            if p.get("valid") is False and isinstance(p.get("counterexample"), Mapping)]


def _roles(example: Mapping[str, Any]) -> dict[int, str]:
    roles = {int(i): "linearized" for i in list(example.get("prefix") or [])[-PREFIX_SHOWN:]}
    roles.update({int(i): "pending" for i in example.get("pending") or []})
    roles.update({int(i): "stuck" for i in example.get("stuck") or []})
    return roles


def _svg(chosen: list[tuple[Span, str, str]]) -> Markup:
    processes = list(dict.fromkeys(span.process for span, _, _ in chosen))
    begin = min(span.start for span, _, _ in chosen)
    finish = max(span.end or span.start for span, _, _ in chosen)
    finish = max(finish, begin + 1)
    wide = WIDTH - LABEL - 10
    height = ROW * len(processes) + 30

    def x(when: int) -> float:
        return LABEL + (when - begin) / (finish - begin) * wide

    parts = [element("text", f"process {p}", x=4, y=ROW * i + 18, font_size=12)
             for i, p in enumerate(processes)]
    for span, role, text in chosen:
        row = processes.index(span.process)
        left = x(span.start)
        right = x(span.end) if span.end is not None else WIDTH - 10
        width = max(right - left, 3)
        title = element("title", f"{role}: {text}")
        parts.append(element("g", title,
                             element("rect", x=f"{left:.1f}", y=ROW * row + 4,
                                     width=f"{width:.1f}", height=ROW - 8, rx=3,
                                     fill=ROLE_COLORS[role], stroke="#333",
                                     stroke_width=2 if role == "stuck" else 0.5),
                             element("text", text[:60], x=f"{left + 3:.1f}", y=ROW * row + 18,
                                     font_size=11)))
    span_ms = (finish - begin) / 1e6
    parts.append(element("text", f"{span_ms:.3f} ms from the first to the last event shown",
                         x=LABEL, y=height - 6, font_size=11, fill="#59636e"))
    return element("svg", *parts, xmlns="http://www.w3.org/2000/svg", width=WIDTH,
                   height=height, viewBox=f"0 0 {WIDTH} {height}", role="img")


def _legend() -> Markup:
    return join(element("span", role, class_="tag",
                        style=f"background:{color};color:#1f2328;margin-right:6px")
                for role, color in ROLE_COLORS.items())


def _section(source: str, partition: Mapping[str, Any], spans: Mapping[int, Span]) -> Markup:
    example = partition["counterexample"]
    descriptions = {str(k): v for k, v in (example.get("descriptions") or {}).items()}
    roles = _roles(example)
    stuck_text = "; ".join(descriptions.get(str(i), f"op {i}") for i in example.get("stuck") or [])
    where = partition.get("partition")
    summary = facts([
        ("history", source or "history.jsonl"),
        ("partition", "the whole history" if where is None else where),
        ("operations in the partition", partition.get("ops")),
        ("longest linearizable prefix", f"{len(example.get('prefix') or [])} ops"),
        ("model state after it", example.get("state")),
        ("cannot linearize", stuck_text),
    ])
    chosen = []
    for index, role in sorted(roles.items()):
        span = spans.get(index)
        if span is not None:
            chosen.append((span, role, descriptions.get(str(index), f"{span.f} #{index}")))
    rows = [[role, span.process, span.invoke.index, f"{span.start / 1e9:.6f}",
             "" if span.end is None else f"{span.end / 1e9:.6f}", text]
            for span, role, text in chosen]
    drawing = (join([element("p", _legend()), _svg(chosen)]) if chosen else
               element("p", "The ops of this counterexample are not in the run's history.",
                       class_="notice"))
    return join([
        element("h3", "The whole history is not linearizable" if where is None
                else f"Partition {where}: not linearizable"),
        summary, drawing,
        table(["role", "process", "invoke #", "call (s)", "return (s)", "operation"], rows),
    ])


def render_counterexamples(found: Sequence[tuple[str, dict[str, Any]]],
                           spans: Sequence[Span]) -> Markup:
    """The report section: one block per invalid partition."""
    if not found:
        return element("p", "No linearizability counterexample in this run.", class_="muted")
    by_invoke = {span.invoke.index: span for span in spans}
    return join(_section(source, partition, by_invoke) for source, partition in found)
