"""`timeline.html`: one column per process, one box per op, colored by outcome.

Boxes run from the op's invocation to its completion in history order (a
process has one op open at a time, so boxes in a column never overlap); hover
shows the op. Huge histories are cut to their first `MAX_OPS` ops, with a notice.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from checker.history import NEMESIS, Op
from reports.html import Markup, element, join, render, trusted
from reports.layout import TIMELINE_FILE
from reports.plots import Span

__all__ = ["MAX_OPS", "describe_op", "write_timeline"]

MAX_OPS = 10_000
COLUMN = 120
GAP = 6
ROW = 14
HEAD = 24


def _short(value: Any, limit: int = 300) -> str:
    text = json.dumps(value, default=repr, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_op(invoke: Op, complete: Op | None) -> str:
    """A plain-text description of an op, for hover text."""
    lines = [f"process {invoke.process}, {invoke.f}, "
             f"{complete.type if complete else 'never completed'}",
             f"invoke #{invoke.index} at {invoke.time / 1e9:.6f} s: {_short(invoke.value)}"]
    if complete is not None:
        lines.append(f"{complete.type} #{complete.index} at {complete.time / 1e9:.6f} s "
                     f"({(complete.time - invoke.time) / 1e6:.3f} ms): {_short(complete.value)}")
        for key, value in complete.extra.items():
            lines.append(f"{key}: {_short(value, 200)}")
    return "\n".join(lines)


def _nemesis_boxes(ops: Sequence[Op]) -> list[tuple[Op, Op | None, str]]:
    boxes: list[tuple[Op, Op | None, str]] = []
    open_invoke: Op | None = None
    for op in ops:
        if op.process != NEMESIS:
            continue
        if op.type == "invoke":
            open_invoke = op
        elif open_invoke is not None and open_invoke.f == op.f:
            boxes.append((open_invoke, op, "nemesis"))
            open_invoke = None
        else:
            boxes.append((op, op, "nemesis"))
    return boxes


def write_timeline(ops: Sequence[Op], spans: Sequence[Span], out: Path,
                   title: str = "Timeline") -> Path:
    """Write `timeline.html` into `out` and return its path."""
    boxes = [(s.invoke, s.complete, s.status) for s in spans]
    boxes += _nemesis_boxes(ops)
    boxes.sort(key=lambda b: b[0].index)
    notice = Markup("")
    if len(boxes) > MAX_OPS:
        notice = element("p", f"This history has {len(boxes)} operations; the timeline shows "
                              f"the first {MAX_OPS}. Every operation is in history.jsonl.",
                         class_="notice")
        boxes = boxes[:MAX_OPS]
    processes: list[Any] = [NEMESIS] if any(b[2] == "nemesis" for b in boxes) else []
    for invoke, _, kind in boxes:
        if kind != "nemesis" and invoke.process not in processes:
            processes.append(invoke.process)
    column = {p: i for i, p in enumerate(processes)}
    last = max((b[1].index if b[1] else b[0].index for b in boxes), default=0)
    first = boxes[0][0].index if boxes else 0
    rows = []
    for invoke, complete, kind in boxes:
        end = complete.index if complete is not None else last
        top = HEAD + (invoke.index - first) * ROW
        height = max((end - invoke.index) * ROW, ROW) - 1
        left = column[invoke.process] * (COLUMN + GAP)
        rows.append(element(
            "div", invoke.f, class_=f"op {kind}", title=describe_op(invoke, complete),
            style=f"left:{left}px;top:{top}px;width:{COLUMN}px;height:{height}px"))
    heads = [element("div", p, class_="proc",
                     style=f"left:{i * (COLUMN + GAP)}px;width:{COLUMN}px")
             for i, p in enumerate(processes)]
    page = render("timeline.html", {
        "title": title,
        "style": trusted("style.css"),
        "notice": notice,
        "width": str(max(len(processes), 1) * (COLUMN + GAP)),
        "height": str(HEAD + (last - first + 2) * ROW),
        "heads": join(heads),
        "boxes": join(rows),
    })
    path = out / TIMELINE_FILE
    path.write_text(page, encoding="utf-8")
    return path
