"""Elle-style cycles in the dependency graph that the queue's offsets give.

Vertices are committed ops (ok, or info proven by a read); the edges (ww, wr, ww+wr and
rw) and which ops are vertices come key by key from `checker.queue.edges`, on Spark
executors too, as flat ints in each `KeyReport`. `cycle_anomalies` merges them on the
driver, finds strongly connected components with an iterative Tarjan, and one short
cycle per component by breadth-first search:
  G0        a cycle of ww edges only
  G1c       a cycle with a wr edge and no rw edge (a wr-only one if the component has it)
  G-single  a cycle with exactly one rw edge (read skew)
  G2        a cycle with several rw edges, where no cycle of its component has one
            alone (write skew; Elle's G2-item)
`TxnChecker` reports them with G1b (found key by key, `checker.queue.finders`). As
Jepsen's `allowed-error-types`: G0 is allowed (Kafka never isolates writes: log order
is not commit order), and so is G1c unless some cycle has wr edges only (Jepsen allows
G1c when it infers ww edges). G1b is allowed too: a poll may end inside a committed
transaction's records (`max.poll.records`), so it is reported for the record only.
G-single and G2 fail when some such cycle has no ww or ww+wr edge: at read_committed a
wr edge and an rw edge (whose writer began after its reader ended) each lead to a later
commit, so such a cycle cannot happen; one that needs a ww edge can, as G1c. They are
allowed when the test's `isolation_level` (the consumers' Kafka `isolation.level`,
default "read_committed") is "read_uncommitted": polls then read records before their
transaction commits, so wr edges no longer order commits, and G1c is allowed then too
(two transactions may each read the other's uncommitted send).
"""

from __future__ import annotations

import time
from array import array
from collections import deque
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from checker.allowed import because
from checker.core import Anomaly, Result, condense
from checker.queue.analysis import (
    KEY_TXN_ANOMALIES,
    AnalysisChecker,
    QueueAnalysis,
    reads_uncommitted,
)
from checker.queue.edges import EDGE_FIELDS, KIND_NAMES, RW, WR, WW, WW_WR

__all__ = ["Cycles", "TxnChecker", "cycle_anomalies", "strongly_connected"]

ALLOWED_ALWAYS = frozenset({"G0", "G1b"})


@dataclass
class Edge:
    kind: int
    key: Hashable
    offsets: tuple[int, int]
    values: tuple[Any, Any]


@dataclass
class Graph:
    """Adjacency per edge kind, and the first edge seen between two ops for each kind."""

    adjacency: dict[int, dict[int, list[int]]] = field(
        default_factory=lambda: {kind: {} for kind in KIND_NAMES})
    edges: dict[tuple[int, int, int], Edge] = field(default_factory=dict)

    @classmethod
    def of(cls, key_edges_: Iterable[tuple[Hashable, array, list[tuple[Any, Any]]]]) -> Graph:
        graph = cls()
        for key, flat, values in key_edges_:
            for at in range(0, len(flat), EDGE_FIELDS):
                source, target, kind, low, high = flat[at:at + EDGE_FIELDS]
                if (source, target, kind) in graph.edges:
                    continue
                graph.edges[source, target, kind] = Edge(kind, key, (low, high),
                                                         values[at // EDGE_FIELDS])
                graph.adjacency[kind].setdefault(source, []).append(target)
        return graph

    def joined(self, kinds: Sequence[int]) -> dict[int, list[int]]:
        """One adjacency of the given kinds, each target once."""
        if len(kinds) == 1:
            return self.adjacency[kinds[0]]
        joined: dict[int, list[int]] = {}
        for kind in kinds:
            for source, targets in self.adjacency[kind].items():
                joined.setdefault(source, []).extend(targets)
        return {source: list(dict.fromkeys(targets)) for source, targets in joined.items()}


def strongly_connected(adjacency: Mapping[int, Sequence[int]]) -> list[list[int]]:
    """Tarjan's strongly connected components of more than one vertex, iteratively."""
    order: dict[int, int] = {}
    low: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    components: list[list[int]] = []
    for root in adjacency:
        if root in order:
            continue
        order[root] = low[root] = len(order)
        stack.append(root)
        on_stack.add(root)
        work = [(root, 0)]
        while work:
            vertex, at = work[-1]
            targets = adjacency.get(vertex, ())
            if at < len(targets):
                work[-1] = (vertex, at + 1)
                target = targets[at]
                if target not in order:
                    order[target] = low[target] = len(order)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, 0))
                elif target in on_stack:
                    low[vertex] = min(low[vertex], order[target])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[vertex])
            if low[vertex] == order[vertex]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == vertex:
                        break
                if len(component) > 1:
                    components.append(component)
    return components


def _shortest_path(adjacency: Mapping[int, Sequence[int]], members: set[int], start: int,
                   goal: int) -> list[int] | None:
    """A shortest path start -> ... -> goal inside `members` (breadth first); [start] if
    they are the same op."""
    if start == goal:
        return [start]
    parent = {start: start}
    queue = deque([start])
    while queue:
        vertex = queue.popleft()
        for target in adjacency.get(vertex, ()):
            if target in parent or target not in members:
                continue
            parent[target] = vertex
            if target == goal:
                path = [goal]
                while path[-1] != start:
                    path.append(parent[path[-1]])
                return path[::-1]
            queue.append(target)
    return None


def _cycle_through(adjacency: Mapping[int, Sequence[int]], members: set[int], source: int,
                   target: int) -> list[int] | None:
    """A short cycle source -> target -> ... -> source inside `members`."""
    back = _shortest_path(adjacency, members, target, source)
    return None if back is None else [source, *back]


@dataclass
class Cycles:
    """The cycle anomalies, and those of their kinds found on a cycle without ww edges
    (that no inference from log order stands behind)."""

    anomalies: dict[str, Anomaly]
    without_ww: frozenset[str]
    stats: dict[str, int]


def cycle_anomalies(key_edges_: Iterable[tuple[Hashable, array, list[tuple[Any, Any]]]]
                    ) -> Cycles:
    """G0, G1c, G-single and G2, one cycle per strongly connected component of each
    search, each with its steps."""
    graph = Graph.of(key_edges_)
    found: dict[str, list[dict[str, Any]]] = {"G0": [], "G1c": [], "G-single": [], "G2": []}
    ww = graph.adjacency[WW]
    for component in strongly_connected(ww):
        members = set(component)
        start = min(component)
        cycle = _cycle_through(ww, members, start, min(t for t in ww[start] if t in members))
        found["G0"].append(_witness(graph, cycle, (WW,)))
    wr = graph.adjacency[WR]
    covered: set[int] = set()
    for component in strongly_connected(wr):
        members = set(component)
        covered |= members
        start = min(component)
        cycle = _cycle_through(wr, members, start, min(t for t in wr[start] if t in members))
        found["G1c"].append(_witness(graph, cycle, (WR,)))
    without_ww = {"G1c": len(found["G1c"])}
    everything = graph.joined((WW, WR, WW_WR))
    for component in strongly_connected(everything):
        members = set(component)
        if members & covered:
            continue
        entry = min(((source, target) for kind in (WR, WW_WR) for source in members
                     for target in graph.adjacency[kind].get(source, ()) if target in members),
                    default=None)
        if entry is None:
            continue
        cycle = _cycle_through(everything, members, *entry)
        found["G1c"].append(_witness(graph, cycle, (WR, WW_WR, WW)))
    covered = _anti_dependency_cycles(graph, (WR,), set(), found)
    without_ww.update({kind: len(found[kind]) for kind in ("G-single", "G2")})
    _anti_dependency_cycles(graph, (WR, WW_WR, WW), covered, found)
    anomalies = {kind: condense(sorted(witnesses, key=lambda w: (len(w["cycle"]), w["ops"])))
                 for kind, witnesses in found.items() if witnesses}
    stats = {"graph-ops": len({v for s, t, _ in graph.edges for v in (s, t)}),
             "graph-edges": len(graph.edges),
             "rw-edges": sum(len(targets) for targets in graph.adjacency[RW].values()),
             **{f"{kind}-without-ww": count for kind, count in without_ww.items()}}
    return Cycles(anomalies, frozenset(k for k, count in without_ww.items() if count), stats)


def _anti_dependency_cycles(graph: Graph, direct: Sequence[int], skip: set[int],
                            found: dict[str, list[dict[str, Any]]]) -> set[int]:
    """Per strongly connected component of the `direct` and rw edges that holds an rw
    edge (and no op of `skip`): a G-single cycle (an rw edge, then `direct` edges back),
    else a G2 one. Returns the ops of those components."""
    through = graph.joined(direct)
    rw = graph.adjacency[RW]
    everything = graph.joined((*direct, RW))
    preference = (*direct, RW)
    covered: set[int] = set()
    for component in strongly_connected(everything):
        members = set(component)
        anti = sorted((source, target) for source in members
                      for target in rw.get(source, ()) if target in members)
        if not anti or members & skip:
            continue
        covered |= members
        for source, target in anti:
            back = _shortest_path(through, members, target, source)
            if back is not None:
                found["G-single"].append(_witness(graph, [source, *back], preference, RW))
                break
        else:
            cycle = _cycle_through(everything, members, *anti[0])
            found["G2"].append(_witness(graph, cycle, preference, RW))
    return covered


def _witness(graph: Graph, cycle: list[int] | None, preference: Sequence[int],
             first: int | None = None) -> dict[str, Any]:
    """The cycle with its steps, each of the first kind of `preference` that joins its
    two ops (the first step of kind `first`, if given)."""
    assert cycle is not None, "a strongly connected component always has a cycle"
    steps = []
    for at, (source, target) in enumerate(zip(cycle, cycle[1:], strict=False)):
        kind = first if at == 0 and first is not None else next(
            k for k in preference if (source, target, k) in graph.edges)
        steps.append(_step(source, target, graph.edges[source, target, kind]))
    return {"cycle": cycle, "steps": steps, "ops": sorted(set(cycle))}


def _step(source: int, target: int, edge: Edge) -> dict[str, Any]:
    (low, high), (before, value), key = edge.offsets, edge.values, edge.key
    if edge.kind == WW:
        why = (f"op {source} sent {before!r} to key {key!r} at offset {low}, before op "
               f"{target} sent {value!r} at offset {high}")
    elif edge.kind == WR:
        why = f"op {target} polled value {value!r} of key {key!r} that op {source} sent"
    elif edge.kind == RW:
        why = (f"op {source} polled key {key!r} up to {before!r} at offset {low} and "
               f"completed before op {target} began, which sent {value!r} at offset {high}, "
               f"the key's next committed record")
    else:
        why = (f"op {source} sent {before!r} to key {key!r} at offset {low}, before the "
               f"send of {value!r} at offset {high} that op {target} polled")
    step = {"from": source, "to": target, "type": KIND_NAMES[edge.kind], "key": key,
            "value": value, "offset": high, "why": why}
    if edge.kind != WR:
        step.update({"previous-value": before, "previous-offset": low})
    return step


class TxnChecker(AnalysisChecker):
    """G0, G1b, G1c, G-single and G2 over the queue analysis; see the module docstring
    for what is allowed."""

    anomaly_types: ClassVar[tuple[str, ...]] = (*KEY_TXN_ANOMALIES, "G0", "G1c", "G-single", "G2")

    def check_analysis(self, test: Mapping[str, Any], analysis: QueueAnalysis,
                       opts: Mapping[str, Any]) -> Result:
        started = time.monotonic()
        anomalies = {kind: analysis.anomalies[kind] for kind in KEY_TXN_ANOMALIES
                     if kind in analysis.anomalies}
        cycles = cycle_anomalies(analysis.edges)
        anomalies.update(cycles.anomalies)
        tolerated = ALLOWED_ALWAYS | ({"G1c", "G-single", "G2"} - cycles.without_ww)
        if reads_uncommitted(test):
            tolerated |= {"G1c", "G-single", "G2"}
        found = set(anomalies)
        stats: dict[str, Any] = dict(cycles.stats)
        if found & tolerated:
            stats["allowed-because"] = {
                kind: because(kind, "isolation.level=read_uncommitted", cause="precommitted-read")
                if kind in cycles.without_ww else because(kind)
                for kind in sorted(found & tolerated)}
        return Result(valid=not (found - tolerated), anomalies=anomalies,
                      stats=stats, allowed=sorted(found & tolerated),
                      seconds=time.monotonic() - started)
