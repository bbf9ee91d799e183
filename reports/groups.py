"""The consumer-group timeline: one plot per group, and the report's section about them.

Only for histories with consumer groups (`checker.groups.membership`). A plot's x axis is
time since the test started, its rows the keys; each ownership interval is a bar colored
by member and labelled with the member (process, short member id) and generation; a
strip above the keys marks each rebalance from its first revocation to its last
assignment, with its duration; nemesis faults are shaded as on the other plots. The
section shows each plot with a table of the group's rebalances.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from checker.groups.membership import (
    Group,
    GroupsHistory,
    Ownership,
    Rebalance,
    read_groups,
    rebalances,
)
from checker.history import NemesisPeriod, Op
from reports.html import Markup, element, join, table
from reports.plots import Plot, _figure, _legend, _save, _shade

__all__ = ["GroupTimeline", "group_section", "group_timelines", "write_group_plots"]

NS = 1e9
MAX_KEYS = 48
MAX_LABELS = 120
MEMBER_COLORS = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1",
                 "#ff9da7", "#9c755f", "#bab0ac")
REBALANCE_COLOR = "#333333"


@dataclass(frozen=True)
class GroupTimeline:
    """What the plot and the section show of one group."""

    group: Group
    keys: tuple[Any, ...]
    rebalances: tuple[Rebalance, ...]
    end: int

    @property
    def file(self) -> str:
        return f"group-{re.sub(r'[^A-Za-z0-9_.-]', '_', self.group.name)}.png"


def group_timelines(ops: Sequence[Op]) -> list[GroupTimeline]:
    """One timeline per group of the history, by group name; none in assign mode."""
    history: GroupsHistory = read_groups(ops)
    return [GroupTimeline(group, tuple(_keys(group, history)), tuple(rebalances(group)),
                          history.end)
            for _, group in sorted(history.groups.items())]


def _keys(group: Group, history: GroupsHistory) -> list[Any]:
    owned = {o.key for o in group.ownerships}
    return sorted(owned | set(history.keys), key=lambda k: (not isinstance(k, int), repr(k)))


def member_label(owned: Ownership) -> str:
    short = f"·{owned.member[-4:]}" if owned.member else ""
    generation = "?" if owned.generation is None else owned.generation
    return f"p{owned.process}{short} g{generation}"


def write_group_plots(timelines: Sequence[GroupTimeline], periods: Sequence[NemesisPeriod],
                      out: Path) -> list[Plot]:
    return [_group_plot(timeline, periods, out) for timeline in timelines]


def _group_plot(timeline: GroupTimeline, periods: Sequence[NemesisPeriod],
                out: Path) -> Plot:
    keys = timeline.keys[:MAX_KEYS]
    rows = {key: at for at, key in enumerate(keys)}
    figure, (ax,) = _figure()
    figure.set_size_inches(11, max(3.0, 0.32 * (len(keys) + 1) + 1.6))
    end = timeline.end / NS
    colors: dict[Any, str] = {}
    labelled = 0
    for owned in sorted(timeline.group.ownerships, key=lambda o: (o.start, o.start_op)):
        if owned.key not in rows:
            continue
        color = colors.setdefault(owned.process, MEMBER_COLORS[len(colors) % len(MEMBER_COLORS)])
        start = owned.start / NS
        stop = end if owned.end is None else owned.end / NS
        ax.broken_barh([(start, max(stop - start, end / 2000))], (rows[owned.key] - 0.4, 0.8),
                       facecolors=color, edgecolors="white", linewidth=0.5,
                       label=f"p{owned.process}")
        if labelled < MAX_LABELS and stop - start > end / 25:
            ax.text(start + (stop - start) / 2, rows[owned.key], member_label(owned),
                    ha="center", va="center", fontsize=7, color="white", clip_on=True)
            labelled += 1
    strip = len(keys)
    for rebalance in timeline.rebalances:
        start, stop = rebalance.start / NS, rebalance.end / NS
        ax.broken_barh([(start, max(stop - start, end / 1000))], (strip - 0.3, 0.6),
                       facecolors=REBALANCE_COLOR, label="rebalance")
        ax.axvline(start, color=REBALANCE_COLOR, linewidth=0.6, linestyle=":")
        generation = "" if rebalance.generation is None else f"g{rebalance.generation} "
        ax.text(start, strip + 0.45, f"{generation}{stop - start:.2f}s", fontsize=6,
                rotation=45, ha="left", va="bottom", clip_on=True)
    faults = _shade([ax], periods, end)
    ax.set_yticks(range(len(keys) + 1), [f"key {k}" for k in keys] + ["rebalances"])
    ax.set_ylim(-0.7, strip + 1.6)
    ax.set_xlim(0, max(end, 1e-3))
    ax.set_xlabel("time since test start (s)")
    _legend(ax, faults)
    more = f" (the first {MAX_KEYS} of {len(timeline.keys)} keys)" \
        if len(timeline.keys) > MAX_KEYS else ""
    name = timeline.group.name
    return _save(figure, out, timeline.file, f"Consumer group {name}: ownership over time",
                 f"Each bar is a member owning a key{more}, labelled by process, short "
                 "member id and generation; the top strip marks each rebalance from its "
                 "first revocation to its last assignment, with its duration; shaded bands "
                 "are nemesis faults.")


def group_section(timelines: Sequence[GroupTimeline], plots: Sequence[Plot]) -> Markup:
    """The report's consumer-group section, or nothing when the history has no group."""
    if not timelines:
        return Markup("")
    by_file = {plot.file: plot for plot in plots}
    parts: list[Any] = [element("h2", "Consumer groups", id="groups")]
    for timeline in timelines:
        group = timeline.group
        parts.append(element("h3", f"Group {group.name}"))
        plot = by_file.get(timeline.file)
        if plot is not None:
            parts.append(element("figure", element("img", src=plot.file, alt=plot.title,
                                                   loading="eager"),
                                 element("figcaption", plot.caption)))
        members = len({o.process for o in group.ownerships})
        parts.append(element("p", f"{members} members, {len(timeline.rebalances)} rebalances, "
                                  f"{len(group.ownerships)} ownership intervals."))
        if timeline.rebalances:
            parts.append(table(
                ["generation", "from (s)", "to (s)", "duration (s)", "members assigned",
                 "ops"],
                [[r.generation, f"{r.start / NS:.3f}", f"{r.end / NS:.3f}",
                  f"{(r.end - r.start) / NS:.3f}", join(map(str, r.members), ", "),
                  join(map(str, r.ops[:12]), ", ") + (" …" if len(r.ops) > 12 else "")]
                 for r in timeline.rebalances]))
    return join(parts)
