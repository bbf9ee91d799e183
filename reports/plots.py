"""The run's plots, drawn with matplotlib's Agg canvas (no pyplot, no display).

Each plot is one function from run data to a PNG beside the report; one that
has no data to draw is left out. Times are seconds since the test started;
nemesis periods are shaded bands (a line for an instantaneous fault) with a
legend, on every plot over time.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.artist import Artist
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from checker.cluster.event_log import ControllerEvent
from checker.history import NEMESIS, Op
from reports.run import NemesisPeriod, Run, nemesis_periods

__all__ = ["Plot", "Span", "client_spans", "clock_offsets", "gapped", "write_plots"]

NS = 1e9
SIZE = (11, 4)
DPI = 100
STATUS_COLORS = {"ok": "#2f7ed8", "info": "#f0a30a", "fail": "#d62728"}
FAULT_COLORS = ("#9e9e9e", "#c5a3d9", "#f4b183", "#a9d18e", "#9dc3e6", "#ffd966", "#f8cbad")
QUANTILES = (0.5, 0.95, 0.99, 1.0)
MAX_KEYS_DRAWN = 12


@dataclass(frozen=True)
class Plot:
    """A PNG written beside the report."""

    file: str
    title: str
    caption: str


@dataclass(frozen=True, slots=True)
class Span:
    """A client op from invoke to completion (`end` None: never completed)."""

    process: Any
    f: str
    status: str
    start: int
    end: int | None
    invoke: Op
    complete: Op | None


def client_spans(ops: Iterable[Op]) -> list[Span]:
    """Client invocations paired with their completions, in invoke order."""
    spans: list[Span | None] = []
    open_at: dict[Any, tuple[int, Op]] = {}
    for op in ops:
        if op.process == NEMESIS:
            continue
        if op.type == "invoke":
            open_at[op.process] = (len(spans), op)
            spans.append(None)
        elif op.process in open_at:
            at, invoke = open_at.pop(op.process)
            spans[at] = Span(op.process, invoke.f, op.type, invoke.time, op.time, invoke, op)
    for at, invoke in open_at.values():
        spans[at] = Span(invoke.process, invoke.f, "info", invoke.time, None, invoke, None)
    return [s for s in spans if s is not None]


def write_plots(run: Run, out: Path, spans: Sequence[Span] | None = None) -> list[Plot]:
    """Every plot the run has data for, written into `out`."""
    spans = client_spans(run.ops) if spans is None else spans
    periods = nemesis_periods(run.ops)
    drawn = [
        _latency_raw(spans, periods, out),
        _latency_quantiles(spans, periods, out),
        _rate(spans, periods, out),
        _offsets(run, spans, periods, out),
        _leaders(run, periods, out),
        _unseen(run, periods, out),
        _clocks(run, periods, out),
    ]
    return [plot for plot in drawn if plot is not None]


# --- drawing helpers --------------------------------------------------------------------------

def _figure(rows: int = 1) -> tuple[Figure, list[Any]]:
    figure = Figure(figsize=(SIZE[0], SIZE[1] * (1 if rows == 1 else 0.75 * rows)), dpi=DPI)
    FigureCanvasAgg(figure)
    axes = figure.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]
    for ax in axes:
        ax.grid(True, color="#e5e5e5", linewidth=0.6)
        ax.set_axisbelow(True)
        for side in ("top", "right"):
            ax.spines[side].set_visible(False)
    return figure, list(axes)


def _save(figure: Figure, out: Path, name: str, title: str, caption: str) -> Plot:
    figure.suptitle(title, x=0.01, ha="left", fontsize=12, fontweight="bold")
    figure.tight_layout()
    figure.savefig(out / name, dpi=DPI)
    return Plot(name, title, caption)


def _shade(axes: Sequence[Any], periods: Sequence[NemesisPeriod], end: float) -> list[Artist]:
    """Shade nemesis periods on every axis; returns legend handles, one per fault."""
    colors: dict[str, str] = {}
    handles: list[Artist] = []
    for period in periods:
        name = period.name
        if name not in colors:
            colors[name] = FAULT_COLORS[len(colors) % len(FAULT_COLORS)]
        color = colors[name]
        start = period.start / NS
        stop = end if period.end is None else period.end / NS
        for ax in axes:
            if stop > start:
                handle = ax.axvspan(start, stop, color=color, alpha=0.3, linewidth=0,
                                    label=name)
            else:
                handle = ax.axvline(start, color=color, linewidth=1.5, linestyle="--",
                                    label=name)
        if name not in {h.get_label() for h in handles}:
            handles.append(handle)
    return handles


def _legend(ax: Any, extra: Sequence[Artist] = ()) -> None:
    handles, _ = ax.get_legend_handles_labels()
    seen, kept = set(), []
    for handle in [*handles, *extra]:
        if handle.get_label() not in seen and not handle.get_label().startswith("_"):
            seen.add(handle.get_label())
            kept.append(handle)
    if kept:
        ax.legend(handles=kept, loc="upper left", bbox_to_anchor=(1.005, 1), fontsize=8,
                  frameon=False)


def _end_seconds(spans: Sequence[Span]) -> float:
    return max((s.end or s.start for s in spans), default=0) / NS


def _finished(spans: Sequence[Span]) -> list[tuple[Span, int]]:
    """The spans that completed, each with its end."""
    return [(s, s.end) for s in spans if s.end is not None]


# --- the plots --------------------------------------------------------------------------------

def _latency_raw(spans: Sequence[Span], periods: Sequence[NemesisPeriod],
                 out: Path) -> Plot | None:
    done = _finished(spans)
    if not done:
        return None
    figure, (ax,) = _figure()
    for status, color in STATUS_COLORS.items():
        chosen = [(s, end) for s, end in done if s.status == status]
        if chosen:
            ax.plot([s.start / NS for s, _ in chosen],
                    [max((end - s.start) / 1e6, 1e-3) for s, end in chosen],
                    linestyle="none", marker=".", markersize=3, color=color, alpha=0.6,
                    label=f"{status} ({len(chosen)})", rasterized=True)
    faults = _shade([ax], periods, _end_seconds(spans))
    ax.set_yscale("log")
    ax.set_xlabel("time since test start (s)")
    ax.set_ylabel("latency (ms)")
    _legend(ax, faults)
    return _save(figure, out, "latency-raw.png", "Latency, every operation",
                 "One point per completed operation, colored by outcome; shaded bands are "
                 "nemesis faults.")


def _buckets(spans: Sequence[Span]) -> tuple[np.ndarray, float]:
    end = _end_seconds(spans)
    width = max(1.0, end / 100)
    return np.array([s.start / NS for s in spans]) // width, width


def gapped(keys: np.ndarray, values: Sequence[float],
           width: float) -> tuple[np.ndarray, np.ndarray]:
    """Bucket centres and their values, with a NaN between buckets that are not adjacent:
    the line then has a gap over the seconds without data instead of crossing them."""
    x = (np.asarray(keys, dtype=float) + 0.5) * width
    y = np.asarray(values, dtype=float)
    breaks = np.nonzero(np.diff(keys) > 1)[0] + 1
    return np.insert(x, breaks, np.nan), np.insert(y, breaks, np.nan)


def _latency_quantiles(spans: Sequence[Span], periods: Sequence[NemesisPeriod],
                       out: Path) -> Plot | None:
    ok = [(s, end) for s, end in _finished(spans) if s.status == "ok"]
    if not ok:
        return None
    buckets, width = _buckets([s for s, _ in ok])
    latency = np.array([(end - s.start) / 1e6 for s, end in ok])
    order = np.argsort(buckets, kind="stable")
    keys, starts = np.unique(buckets[order], return_index=True)
    groups = np.split(latency[order], starts[1:])
    figure, (ax,) = _figure()
    for q in QUANTILES:
        label = "max" if q == 1.0 else f"p{q * 100:g}"
        ax.plot(*gapped(keys, [np.quantile(g, q) for g in groups], width), marker=".",
                linewidth=1.2, label=label)
    faults = _shade([ax], periods, _end_seconds(spans))
    ax.set_yscale("log")
    ax.set_xlabel("time since test start (s)")
    ax.set_ylabel("latency of ok ops (ms)")
    _legend(ax, faults)
    return _save(figure, out, "latency-quantiles.png", "Latency quantiles over time",
                 f"Quantiles of ok operations in {width:g} s buckets.")


def _rate(spans: Sequence[Span], periods: Sequence[NemesisPeriod], out: Path) -> Plot | None:
    done = _finished(spans)
    if not done:
        return None
    figure, (ax,) = _figure()
    end = _end_seconds(spans)
    width = max(1.0, end / 100)
    edges = np.arange(0, end + width, width)
    if len(edges) < 2:
        edges = np.array([0.0, width])
    for status, color in STATUS_COLORS.items():
        times = [stop / NS for s, stop in done if s.status == status]
        if times:
            counts, _ = np.histogram(times, bins=edges)
            ax.step(edges[:-1], counts / width, where="post", color=color, linewidth=1.3,
                    label=status)
    faults = _shade([ax], periods, end)
    ax.set_xlabel("time since test start (s)")
    ax.set_ylabel("completions per second")
    _legend(ax, faults)
    return _save(figure, out, "rate.png", "Throughput over time",
                 f"Completed operations per second by outcome ({width:g} s buckets).")


def _witness_time(run_ops: Sequence[Op], indices: Sequence[int]) -> float | None:
    for index in indices:
        if 0 <= index < len(run_ops) and run_ops[index].index == index:
            return run_ops[index].time / NS
    return None


def _anomaly_witnesses(results: dict[str, Any] | None, kinds: set[str]) -> list[dict]:
    found: list[dict] = []
    for checker in ((results or {}).get("checkers") or {}).values():
        for kind, anomaly in (checker.get("anomalies") or {}).items():
            if kind in kinds:
                found.extend(w for w in anomaly.get("examples", []) if isinstance(w, dict))
    return found


def _offsets(run: Run, spans: Sequence[Span], periods: Sequence[NemesisPeriod],
             out: Path) -> Plot | None:
    by_key: dict[str, tuple[list[float], list[int]]] = defaultdict(lambda: ([], []))
    for span in spans:
        if (span.status != "ok" or span.end is None or span.complete is None
                or not isinstance(span.complete.value, list)):
            continue
        for micro in span.complete.value:
            if (isinstance(micro, list) and len(micro) == 3 and micro[0] == "send"
                    and isinstance(micro[2], list) and len(micro[2]) == 2
                    and isinstance(micro[2][0], int)):
                xs, ys = by_key[str(micro[1])]
                xs.append(span.end / NS)
                ys.append(micro[2][0])
    if not by_key:
        return None
    figure, (ax,) = _figure()
    shown = sorted(by_key, key=lambda k: -len(by_key[k][0]))[:MAX_KEYS_DRAWN]
    for key in sorted(shown):
        xs, ys = by_key[key]
        ax.plot(xs, ys, linestyle="none", marker=".", markersize=2.5, alpha=0.7,
                label=f"key {key}", rasterized=True)
    for kinds, marker, color, label in (({"lost-write", "unseen", "lost-acknowledged"}, "X",
                                         "#d62728", "lost"),
                                        ({"duplicate"}, "^", "#7b1fa2", "duplicated")):
        points = []
        for witness in _anomaly_witnesses(run.results, kinds):
            when = _witness_time(run.ops, witness.get("ops") or [])
            offsets = witness.get("offsets") or [witness.get("offset")]
            points += [(when, o) for o in offsets if when is not None and isinstance(o, int)]
        points = sorted(set(points))
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], linestyle="none",
                    marker=marker, markersize=9, color=color, markeredgecolor="white",
                    label=f"{label} ({len(points)})")
    faults = _shade([ax], periods, _end_seconds(spans))
    ax.set_xlabel("time since test start (s)")
    ax.set_ylabel("offset")
    _legend(ax, faults)
    more = f"; the {MAX_KEYS_DRAWN} busiest of {len(by_key)} keys" if len(by_key) > len(
        shown) else ""
    return _save(figure, out, "offsets.png", "Offsets of acknowledged sends, per partition",
                 f"Each point is an acknowledged send at its offset{more}; crosses mark lost "
                 "writes and triangles duplicates named by the checkers' witnesses.")


def _event_seconds(run: Run, events: Sequence[ControllerEvent]) -> tuple[list[float], str]:
    origin = run.start_wall_ms
    label = "time since test start (s)"
    if origin is None:
        origin = min(e.time for e in events)
        label = "time since the first controller event (s)"
    return [(e.time - origin) / 1000 for e in events], label


def _leaders(run: Run, periods: Sequence[NemesisPeriod], out: Path) -> Plot | None:
    placed = [((e.topic, e.partition), e) for e in run.events
              if e.topic is not None and e.partition is not None
              and (e.new_leader is not None or e.isr is not None)]
    if not placed:
        return None
    seconds, xlabel = _event_seconds(run, [e for _, e in placed])
    series: dict[tuple[str, int], list[tuple[float, ControllerEvent]]] = defaultdict(list)
    for when, (tp, event) in zip(seconds, placed, strict=True):
        series[tp].append((when, event))
    end = max(max(seconds), max((op.time for op in run.ops), default=0) / NS)
    figure, (leaders, isr) = _figure(rows=2)
    unclean = []
    for (topic, partition), points in sorted(series.items())[:MAX_KEYS_DRAWN]:
        led = [(t, e.new_leader) for t, e in points if e.new_leader is not None]
        sized = [(t, len(e.isr)) for t, e in points if e.isr is not None]
        led += [(end, led[-1][1])] if led else []
        sized += [(end, sized[-1][1])] if sized else []
        label = f"{topic}-{partition}"
        if led:
            line = leaders.step([p[0] for p in led], [p[1] for p in led], where="post",
                                marker="o", markersize=3, label=label)[0]
            unclean += [(t, e.new_leader) for t, e in points if e.unclean]
            color = line.get_color()
        else:
            color = None
        if sized:
            isr.step([p[0] for p in sized], [p[1] for p in sized], where="post", marker=".",
                     color=color, label=label)
    if unclean:
        leaders.plot([u[0] for u in unclean], [u[1] for u in unclean], linestyle="none",
                     marker="X", markersize=10, color="#d62728", label="unclean election")
    faults = _shade([leaders, isr], periods, end)
    leaders.set_ylabel("leader (broker id)")
    isr.set_ylabel("ISR size")
    isr.set_xlabel(xlabel)
    leaders.yaxis.get_major_locator().set_params(integer=True)
    isr.yaxis.get_major_locator().set_params(integer=True)
    _legend(leaders, faults)
    return _save(figure, out, "leaders.png", "Leaders and ISR over time",
                 "From the controller event logs: the leader and ISR size of each partition "
                 "after every controller decision; crosses are unclean elections.")


def _unseen(run: Run, periods: Sequence[NemesisPeriod], out: Path) -> Plot | None:
    series = None
    for checker in ((run.results or {}).get("checkers") or {}).values():
        found = (checker.get("stats") or {}).get("unseen-over-time")
        if found:
            series = found
            break
    if not series:
        return None
    figure, (ax,) = _figure()
    ax.step([s for s, _ in series], [n for _, n in series], where="post", color="#d62728",
            linewidth=1.5, label="unseen")
    faults = _shade([ax], periods, series[-1][0])
    ax.set_xlabel("time since test start (s)")
    ax.set_ylabel("acknowledged, not yet read")
    _legend(ax, faults)
    return _save(figure, out, "unseen.png", "Unseen writes over time",
                 "Acknowledged sends not yet seen by any poll, per second.")


def clock_offsets(ops: Iterable[Op]) -> dict[str, list[tuple[float, float]]]:
    """Each moved node's wall-clock offset (s) over time (s), from the clock faults'
    completions: a bump sets it, a strobe flips it from its invocation to its completion
    (drawn as its two ends), a reset or heal puts every moved clock back to 0."""
    series: dict[str, list[tuple[float, float]]] = defaultdict(list)
    invoked: dict[str, float] = {}
    for op in ops:
        if op.process != NEMESIS:
            continue
        at = round(op.time / NS, 3)
        if op.f not in invoked:
            invoked[op.f] = at  # the nemesis records each op twice: invoked, then done
            continue
        began = invoked.pop(op.f)
        value = op.value if isinstance(op.value, dict) else {}
        if op.f == "clock-bump" and "node" in value:
            series[value["node"]].append((at, value["offset_ms"] / 1000))
        elif op.f == "clock-strobe" and "node" in value:
            series[value["node"]] += [(began, value["offset_ms"] / 1000), (at, 0.0)]
        elif op.f in ("clock-reset", "heal"):
            for points in series.values():
                if points[-1][1]:
                    points.append((at, 0.0))
    return dict(series)


def _clocks(run: Run, periods: Sequence[NemesisPeriod], out: Path) -> Plot | None:
    series = clock_offsets(run.ops)
    if not series:
        return None
    end = max(op.time for op in run.ops) / NS if run.ops else 0.0
    figure, (ax,) = _figure()
    for node, points in sorted(series.items()):
        times = [0.0, *(t for t, _ in points), end]
        offsets = [0.0, *(o for _, o in points), points[-1][1]]
        ax.step(times, offsets, where="post", linewidth=1.5, label=node)
    faults = _shade([ax], periods, end)
    ax.set_xlabel("time since test start (s)")
    ax.set_ylabel("wall clock - real time (s)")
    _legend(ax, faults)
    return _save(figure, out, "clocks.png", "Node clocks over time",
                 "Each moved node's wall-clock offset from the real time; the monotonic "
                 "clock is never moved. A strobe is drawn from its start to its end.")
