"""`report.html`: what a person reads after a run.

A verdict banner; per checker a summary and a table of anomalies with their
minimal witnesses (time, process, op, key, offset, value), every lost write
with the election it is attributed to, and links into each node's log at the
moment of the anomaly; linearizability counterexamples; the nemesis timeline;
write availability per fault window, key and election (when measured); the
plots; the test configuration and seed. Everything from a history, a log or the
results goes through `reports.html`, which escapes it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from reports.groups import GroupTimeline, group_section, group_timelines, write_group_plots
from reports.html import Markup, element, join, link, render, table, trusted
from reports.linearizability import counterexamples, render_counterexamples
from reports.logs import LogView, write_log_views
from reports.plots import Plot, Span, client_spans, write_plots
from reports.run import Run, RunFiles, load_run, nemesis_periods
from reports.summary import STATE_WORDS, headline, run_state
from reports.timeline import write_timeline
from reports.transactions import TransactionsView, transactions_section, transactions_view

__all__ = ["REPORT_FILE", "Report", "state_label", "write_report"]

REPORT_FILE = "report.html"

NS = 1e9
LOSS_KINDS = ("lost-write", "unseen", "lost-acknowledged", "lost-allowed-by-configuration")
ELECTION_KINDS = ("unclean-election-loss", "clean-election-loss", "unexplained-loss")
WITNESS_FIELDS = ("key", "offset", "offsets", "value", "values", "ops", "election", "cycle",
                  "steps")
VERDICTS = {True: ("valid", "VALID"), False: ("invalid", "INVALID"),
            "unknown": ("unknown", "UNKNOWN"), None: ("none", "NO RESULTS")}
NO_RESULTS = "NO RESULTS"


@dataclass(frozen=True)
class Report:
    """A written report: its path, the run's verdict and state, and the plots beside it."""

    path: Path
    verdict: bool | str | None
    plots: tuple[Plot, ...]
    state: str | None = None


def state_label(state: str | None) -> str:
    """The word of a run's state (`reports.summary.run_state`), "NO RESULTS" for none."""
    return STATE_WORDS.get(state or "", NO_RESULTS)


def write_report(files: RunFiles) -> Report:
    """Render `report.html`, `timeline.html`, the plots and the log views of a run folder."""
    run = load_run(files)
    spans = client_spans(run.ops)
    plots = write_plots(run, run.directory, spans)
    groups = group_timelines(run.ops)
    group_plots = write_group_plots(groups, nemesis_periods(run.ops), run.directory)
    write_timeline(run.ops, spans, run.directory, title=f"{run.name}: operation timeline")
    views = write_log_views(run.directory, run.node_logs)
    page = _Page(run, spans, views, groups, transactions_view(run.ops, run.events))
    path = run.directory / REPORT_FILE
    path.write_text(page.render(plots, group_plots), encoding="utf-8")
    return Report(path, run.verdict, (*plots, *group_plots), run_state(run.results))


def debug_knobs(test: Mapping[str, Any]) -> dict[str, Any]:
    """The `kchaos.debug.*` broker properties a run set (its `broker_config`, wherever
    test.json nests it): each seeds a defect, so the report names it."""
    found: dict[str, Any] = {}
    stack: list[Any] = [test]
    while stack:
        item = stack.pop()
        if isinstance(item, Mapping):
            config = item.get("broker_config")
            if isinstance(config, Mapping):
                found.update((k, v) for k, v in config.items()
                             if str(k).startswith("kchaos.debug."))
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return dict(sorted(found.items()))


class _Page:
    """The pieces of one report page."""

    def __init__(self, run: Run, spans: Sequence[Span], views: Sequence[LogView],
                 groups: Sequence[GroupTimeline] = (),
                 transactions: TransactionsView | None = None) -> None:
        self.run = run
        self.spans = spans
        self.views = views
        self.groups = groups
        self.transactions = transactions or transactions_view([], [])
        self.checkers: dict[str, dict[str, Any]] = dict(
            ((run.results or {}).get("checkers") or {}).items())

    def render(self, plots: Sequence[Plot], group_plots: Sequence[Plot] = ()) -> str:
        state = run_state(self.run.results)
        css, text = state or "none", state_label(state)
        return render("report.html", {
            "title": f"{text}: {self.run.name} {self.run.directory.name}",
            "style": trusted("style.css"),
            "script": trusted("report.js"),
            "verdict_class": css,
            "verdict_text": text,
            "reason": self._verdict_reason(),
            "subtitle": self._subtitle(),
            "toc": join(link(f"#{a}", t) for a, t in (
                ("summary", "Checkers"), ("losses", "Lost writes"), ("anomalies", "Anomalies"),
                ("linearizability", "Linearizability"), ("nemesis", "Nemesis"),
                *((("availability", "Availability"),) if self._availability_stats() else ()),
                *((("groups", "Consumer groups"),) if self.groups else ()),
                *((("transactions", "Transactions"),) if self.transactions else ()),
                ("plots", "Plots"), ("config", "Configuration"), ("logs", "Logs"),
                ("stats", "Statistics"))),
            "problems": join(element("p", problem, class_="problem")
                             for problem in self.run.problems),
            "summary": self._summary(),
            "operations": self._operations(),
            "losses": self._losses(),
            "anomalies": self._anomalies(),
            "linearizability": render_counterexamples(counterexamples(self.run.results),
                                                      self.spans),
            "nemesis": join([self._nemesis(), self._availability(),
                             group_section(self.groups, group_plots),
                             transactions_section(self.transactions, self.run.start_wall_ms)]),
            "plots": self._plots(plots),
            "config": self._config(),
            "logs": self._logs(),
            "stats": self._stats(),
            "written": datetime.now().strftime("%Y-%m-%d %H:%M:%S"),
        })

    # --- banner ---------------------------------------------------------------------------

    def _verdict_reason(self) -> str:
        return headline(self.run.results)

    def _subtitle(self) -> str:
        run = self.run
        started = run.files.started
        clients = len(self.spans)
        end = max((op.time for op in run.ops), default=0) / NS
        parts = [run.name, f"run {run.directory.name}"]
        if started:
            parts.append(f"started {started:%Y-%m-%d %H:%M:%S}")
        parts.append(f"{clients} client ops over {end:.1f} s")
        if "seed" in run.test:
            parts.append(f"seed {run.test['seed']}")
        knobs = debug_knobs(run.test)
        if knobs:
            parts.append("debug knobs (seeded defects): " + ", ".join(
                f"{key}={value}" for key, value in knobs.items()))
        return " · ".join(parts)

    # --- checkers and anomalies ---------------------------------------------------------------

    def _summary(self) -> Markup:
        if not self.checkers:
            return element("p", "No checker results.", class_="muted")
        rows = []
        for name, checker in self.checkers.items():
            allowed = set(checker.get("allowed") or [])
            counts = join(
                element("div", f"{kind}: {a.get('count')}",
                        class_="allowed" if kind in allowed else None)
                for kind, a in (checker.get("anomalies") or {}).items())
            because = _allowed_because(checker)
            rows.append([_verdict_cell(checker.get("valid")), name, counts or "none",
                         join(element("div", f"{kind}: {because.get(kind) or 'allowed'}")
                              for kind in sorted(allowed)) or "",
                         f"{float(checker.get('seconds') or 0):.3f}", checker.get("error")])
        return table(["verdict", "checker", "anomalies", "allowed because",
                      "seconds", "error"], rows)

    def _operations(self) -> Markup:
        """The stats checker's client ops by f (ok, fail, info), each f's judgement, or
        nothing when it did not run."""
        stats = (self.checkers.get("stats") or {}).get("stats") or {}
        by_f = stats.get("by-f")
        if not isinstance(by_f, Mapping) or not by_f:
            return Markup("")
        never, few = set(stats.get("never-succeeded") or ()), set(stats.get("too-few") or ())
        unjudged = set(stats.get("not-judged") or ())
        rows = []
        for f, counts in by_f.items():
            counts = counts if isinstance(counts, Mapping) else {}
            judgement: Any = ""
            if f in never:
                judgement = element("span", "never succeeded", class_="verdict-invalid")
            elif f in few:
                judgement = element("span", "never succeeded, too few to judge",
                                    class_="verdict-unknown")
            elif f in unjudged:
                judgement = element("span", "not judged: ends its process", class_="muted")
            rows.append([f, counts.get("ok", 0), counts.get("fail", 0), counts.get("info", 0),
                         sum(v for v in counts.values() if isinstance(v, int)), judgement])
        return join([
            element("h3", "Client operations by kind", id="operations"),
            element("p", "How each kind of client op (f) completed; an invocation that never "
                         "completed counts as info. An f that never completed ok is invalid "
                         f"(never-succeeded) from {stats.get('min-invocations')} invocations, "
                         "too few to judge below.", class_="muted"),
            table(["f", "ok", "fail", "info", "invoked", "judgement"], rows)])

    def _op(self, index: Any) -> Any:
        ops = self.run.ops
        if isinstance(index, int) and 0 <= index < len(ops) and ops[index].index == index:
            return ops[index]
        return None

    def _wall_ms(self, time_ns: int | None) -> float | None:
        start = self.run.start_wall_ms
        return None if start is None or time_ns is None else start + time_ns / 1e6

    def _log_links(self, time_ns: int | None) -> Markup:
        wall = self._wall_ms(time_ns)
        chosen: dict[str, LogView] = {}
        for view in self.views:
            current = chosen.get(view.node)
            if current is None or ("server" in Path(view.log).name
                                   and "server" not in Path(current.log).name):
                chosen[view.node] = view
        return join((link(view.href(wall), view.node) for view in chosen.values()), " ")

    def _witness_row(self, witness: Mapping[str, Any]) -> list[Any]:
        indices = witness.get("ops") or []
        ops = [op for op in map(self._op, indices) if op is not None]
        first = ops[0] if ops else None
        details = join([*(element("div", f"{k}: {json.dumps(v, default=repr)}")
                          for k, v in witness.items() if k not in WITNESS_FIELDS),
                        _cycle_steps(witness.get("steps"))])
        election = witness.get("election")
        return [
            "" if first is None else f"{first.time / NS:.3f}",
            "" if first is None else first.process,
            join((f"{op.f} #{op.index} ({op.type})" for op in ops), ", ") or
            join(map(str, indices), ", "),
            witness.get("key"),
            witness.get("offset", witness.get("offsets")),
            witness.get("value", witness.get("values")),
            join([details, _election_text(election, self.run.start_wall_ms)
                  if isinstance(election, Mapping) else ""]),
            self._log_links(None if first is None else first.time),
        ]

    def _anomalies(self) -> Markup:
        blocks = []
        lost = self._lost()
        for name, checker in self.checkers.items():
            anomalies = checker.get("anomalies") or {}
            if not anomalies:
                continue
            allowed = set(checker.get("allowed") or [])
            because = _allowed_because(checker)
            blocks.append(element("h3", f"{name}"))
            for kind, anomaly in anomalies.items():
                examples = [w for w in anomaly.get("examples") or [] if isinstance(w, Mapping)]
                note = (f" (allowed: {because.get(kind) or 'by this configuration'})"
                        if kind in allowed else "")
                if kind in LOSS_KINDS or kind in ELECTION_KINDS:
                    blocks.append(element(
                        "p", element("strong", kind), f": {anomaly.get('count')} found{note}; "
                        "each is a row of ", link("#losses", "Lost writes"), " above"))
                    continue
                reused = [w for w in examples
                          if kind == "inconsistent-offsets" and _holds_a_lost_write(w, lost)]
                examples = [w for w in examples if w not in reused]
                shown = f", {len(examples)} witnesses shown" if examples or not reused else ""
                blocks.append(element(
                    "p", element("strong", kind), f": {anomaly.get('count')} found{shown}{note}",
                    *([f"; {len(reused)} hold a write that was lost, its offset written "
                       "again: see ", link("#losses", "Lost writes"), " above"]
                      if reused else [])))
                if examples:
                    blocks.append(table(
                        ["time (s)", "process", "ops", "key", "offset", "value", "details",
                         "logs"], (self._witness_row(w) for w in examples)))
        if not blocks:
            return element("p", "No anomalies.", class_="muted")
        return join(blocks)

    def _lost(self) -> set[tuple[str, str]]:
        """(key, value) of every lost write a witness names, as reprs."""
        return {(repr(w.get("key")), repr(w.get("value")))
                for checker in self.checkers.values()
                for kind, anomaly in (checker.get("anomalies") or {}).items()
                if kind in LOSS_KINDS or kind in ELECTION_KINDS
                for w in anomaly.get("examples") or [] if isinstance(w, Mapping)}

    def _losses(self) -> Markup:
        losses: dict[tuple[str, str], dict[str, Any]] = {}
        attributed: dict[tuple[str, str], tuple[str, Mapping[str, Any]]] = {}
        total = 0
        for checker in self.checkers.values():
            for kind, anomaly in (checker.get("anomalies") or {}).items():
                for witness in anomaly.get("examples") or []:
                    if not isinstance(witness, Mapping):
                        continue
                    identity = (repr(witness.get("key")), repr(witness.get("value")))
                    if kind in LOSS_KINDS:
                        losses.setdefault(identity, {**witness, "kind": witness.get("kind",
                                                                                    kind)})
                    elif kind in ELECTION_KINDS:
                        attributed[identity] = (kind, witness)
                        losses.setdefault(identity, {**witness, "kind": "lost"})
            anomalies = checker.get("anomalies") or {}
            total = max(total, sum(anomalies[k].get("count", 0) for k in ("lost-write", "unseen")
                                   if k in anomalies))
        if not losses:
            return element("p", "No write was lost.", class_="muted")
        rows = []
        for identity, witness in sorted(losses.items(), key=lambda kv: kv[1].get("ops") or []):
            first = self._op((witness.get("ops") or [None])[0])
            kind, election = attributed.get(identity, (None, None))
            if election is None:
                blame: Any = ("no election witness (elections checker did not run, or the "
                              "write was not acknowledged)")
            elif kind == "unexplained-loss":
                blame = element("span", "unexplained: no election after the ack",
                                class_="verdict-invalid")
            else:
                blame = _election_text(election.get("election") or {}, self.run.start_wall_ms)
            rows.append([witness.get("key"), witness.get("value"), witness.get("offset"),
                         "" if first is None else f"{first.time / NS:.3f}",
                         witness.get("kind"), blame,
                         self._log_links(None if first is None else first.time)])
        shown = element("p", f"{len(losses)} lost writes shown (of {max(total, len(losses))} "
                             "counted): every witness when a type has at most 32, else the "
                             "first 8; results.json lists every lost write (the queue "
                             "checker's stats, lost-writes: key, value, offset).",
                        class_="muted")
        return join([shown, table(["key", "value", "offset", "acknowledged at (s)", "kind",
                                   "election", "logs"], rows)])

    # --- the rest -------------------------------------------------------------------------

    def _nemesis(self) -> Markup:
        periods = nemesis_periods(self.run.ops)
        if not periods:
            return element("p", "No nemesis operations.", class_="muted")
        rows = [[p.name, f"{p.start / NS:.3f}",
                 "never healed" if p.end is None else f"{p.end / NS:.3f}",
                 "" if p.end is None else f"{(p.end - p.start) / NS:.3f}",
                 json.dumps(p.value, default=repr), join(map(str, p.ops), ", "),
                 self._log_links(p.start)]
                for p in periods]
        return table(["fault", "from (s)", "to (s)", "duration (s)", "targets / result",
                      "ops", "logs"], rows)

    def _availability_stats(self) -> Mapping[str, Any] | None:
        stats = (self.checkers.get("availability") or {}).get("stats")
        return stats if isinstance(stats, Mapping) and stats else None

    def _availability(self) -> Markup:
        """The availability checker's measurements, as a section of its own (after the
        nemesis timeline, in its slot of the page), or nothing when it did not run."""
        stats = self._availability_stats()
        if stats is None:
            return Markup("")
        overall = stats.get("overall") or {}
        parts: list[Any] = [
            element("h2", "Availability", id="availability"),
            element("p", "Seconds of the client phase without an ok send: "
                         f"{overall.get('buckets-without-ok-send')} of {overall.get('seconds')} "
                         f"({_percent(overall.get('fraction'))})."
                         + (f" {stats['note']}" if stats.get("note") else "")),
        ]
        windows = [w for w in stats.get("fault-windows") or [] if isinstance(w, Mapping)]
        if windows:
            rows = [[w.get("fault"), _seconds(w.get("start-s")),
                     "never healed" if w.get("end-s") is None else _seconds(w.get("end-s")),
                     json.dumps(w.get("value"), default=repr), w.get("buckets"),
                     w.get("buckets-without-ok-send"), _percent(w.get("fraction"))]
                    for w in windows]
            for name, label in (("all-faults", "all fault seconds"),
                                ("outside-faults", "outside faults")):
                total = stats.get(name)
                if isinstance(total, Mapping):
                    rows.append([element("em", label), "", "", "", total.get("buckets"),
                                 total.get("buckets-without-ok-send"),
                                 _percent(total.get("fraction"))])
            parts.append(table(["fault", "from (s)", "to (s)", "targets / result", "seconds",
                                "without ok send", "fraction"], rows))
        else:
            parts.append(element("p", "No fault windows.", class_="muted"))
        stalls = [s for s in stats.get("write-stalls") or [] if isinstance(s, Mapping)]
        if stalls:
            parts.append(element("h3", "Longest write stall per key"))
            parts.append(table(["key", "stall (s)", "from (s)", "to (s)", "ok sends"],
                               [[s.get("key"), _seconds(s.get("seconds")),
                                 _seconds(s.get("start-s")), _seconds(s.get("end-s")),
                                 s.get("ok-sends")] for s in stalls]))
        failovers = [f for f in stats.get("failovers") or [] if isinstance(f, Mapping)]
        parts.append(element("h3", "Failovers"))
        if failovers:
            internal: dict[str, list[Mapping[str, Any]]] = {}
            rows = []
            for f in failovers:
                if str(f.get("topic")).startswith("__"):
                    internal.setdefault(str(f.get("topic")), []).append(f)
                    continue
                rows.append([f"{f.get('topic')}-{f.get('partition')}",
                             f"{f.get('old-leader')} → {f.get('new-leader')}"
                             + (" (unclean)" if f.get("unclean") else ""), f.get("selector"),
                             _seconds(f.get("at-s")), _seconds(f.get("seconds")),
                             f.get("from") or "—"])
            rows += [_internal_failovers(topic, changes)
                     for topic, changes in sorted(internal.items())]
            parts.append(table(
                ["partition", "leader", "selector", "elected at (s)", "failover (s)",
                 "measured from"], rows))
        else:
            logs = stats.get("event-logs")
            parts.append(element("p", "No leader elections in the controller event logs"
                                 f" ({logs} logs read)." if logs is not None else
                                 "No leader elections.", class_="muted"))
        return join(parts)

    def _plots(self, plots: Sequence[Plot]) -> Markup:
        if not plots:
            return element("p", "Nothing to plot (no operations).", class_="muted")
        return join(element("figure", element("img", src=p.file, alt=p.title, loading="eager"),
                            element("figcaption", p.caption)) for p in plots)

    def _config(self) -> Markup:
        test = self.run.test
        if not test:
            return element("p", "No test.json.", class_="muted")
        ordered = sorted(test, key=lambda k: (k != "seed", k != "name", k))
        rows = [[key, test[key] if isinstance(test[key], str) else
                 json.dumps(test[key], default=repr, indent=None)] for key in ordered]
        return table(["setting", "value"], rows, class_="config")

    def _logs(self) -> Markup:
        if not self.run.node_logs:
            return element("p", "No node logs were downloaded.", class_="muted")
        views = {view.log: view for view in self.views}
        rows = []
        for node, logs in self.run.node_logs.items():
            cells = []
            for log in logs:
                view = views.get(log.as_posix())
                cells.append(element("div", link(view.view if view else log.as_posix(),
                                                 log.as_posix()),
                                     " · ", link(log.as_posix(), "raw")))
            rows.append([node, join(cells)])
        log = self.run.files.log
        harness = element("p", link(log.name, f"harness log ({log.name})")) if log.is_file() \
            else Markup("")
        return join([harness, table(["node", "logs"], rows)])

    def _stats(self) -> Markup:
        if not self.checkers:
            return Markup("")
        return join(element("details", element("summary", name),
                            element("pre", json.dumps(c.get("stats") or {}, indent=1,
                                                      default=repr)))
                    for name, c in self.checkers.items() if name != "stats")


def _holds_a_lost_write(witness: Mapping[str, Any], lost: set[tuple[str, str]]) -> bool:
    """Whether an inconsistent offset holds a lost write (the offset written again after
    the loss): that write is a row of the lost writes already."""
    values = witness.get("values")
    return isinstance(values, list) and any(
        (repr(witness.get("key")), repr(value)) in lost for value in values)


def _internal_failovers(topic: str, changes: Sequence[Mapping[str, Any]]) -> list[Any]:
    """One row summing up the leader changes of an internal topic (`__consumer_offsets`
    has fifty partitions), after the workload's own."""
    partitions = len({f.get("partition") for f in changes})
    at = [f["at-s"] for f in changes if isinstance(f.get("at-s"), int | float)]
    took = [f["seconds"] for f in changes if isinstance(f.get("seconds"), int | float)]
    unclean = sum(bool(f.get("unclean")) for f in changes)
    return [element("em", f"{topic} ({partitions} partitions)"),
            f"{len(changes)} leader changes" + (f", {unclean} unclean" if unclean else ""),
            ", ".join(sorted({str(f.get("selector")) for f in changes})),
            f"{_seconds(min(at))} to {_seconds(max(at))}" if at else "—",
            f"up to {_seconds(max(took))}" if took else "—",
            ", ".join(sorted({str(f.get("from") or "—") for f in changes}))]


def _verdict_cell(valid: Any) -> Markup:
    css, text = VERDICTS[valid if valid in (True, False, None) else "unknown"]
    return element("span", text, class_=f"verdict-{css}")


def _seconds(value: Any) -> str:
    return f"{value:.3f}" if isinstance(value, int | float) else ""


def _percent(value: Any) -> str:
    return f"{100 * value:.1f} %" if isinstance(value, int | float) else "n/a"


def _cycle_steps(steps: Any) -> Markup:
    """A dependency cycle's steps (`checker.txn.checker` witnesses), one line each: from, to, edge
    type and why."""
    if not isinstance(steps, list):
        return join([])
    return element("ol", join(
        element("li", f"#{step.get('from')} \u2192 #{step.get('to')} ({step.get('type')}): "
                      f"{step.get('why')}")
        for step in steps if isinstance(step, Mapping)))


def _election_text(election: Mapping[str, Any], start_wall_ms: float | None) -> Markup:
    if not election:
        return Markup("")
    when = election.get("time")
    at = (f"+{(when - start_wall_ms) / 1000:.3f} s" if isinstance(when, int | float)
          and start_wall_ms is not None else f"at {when} ms")
    kind = "unclean" if election.get("unclean") else "clean"
    source = " from the eligible leader replicas" if election.get("elr") is True else ""
    parts = [element("span", f"{kind} election", class_=f"tag {kind}"), source,
             f" {at}: {election.get('topic')}-{election.get('partition')} leader "
             f"{election.get('old_leader')} → {election.get('new_leader')}, leader epoch "
             f"{election.get('leader_epoch')}, ISR {election.get('isr')}, controller "
             f"{election.get('controller_id')} (epoch {election.get('controller_epoch')}, "
             f"logged by {election.get('node')})"]
    if election.get("zombie-leader"):
        parts.append(" — the acknowledging leader had already been deposed")
    return join(parts)


def _allowed_because(checker: Mapping[str, Any]) -> Mapping[str, str]:
    """A checker's reason for each type it allowed (`checker.allowed`), from its stats."""
    because = (checker.get("stats") or {}).get("allowed-because")
    return because if isinstance(because, Mapping) else {}
