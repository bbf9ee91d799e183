"""Grudges: pure functions from nodes to "node -> the nodes it drops traffic from".

Partitions are symmetric here, if a drops b, b drops a, except `one_way`. The shapes are
Jepsen's: `halves` (bisect), `isolate` (split one), `majorities_ring` (everyone sees a
majority, no two the same one), `bridge` (two halves joined by one node that sees
both), `one_way` (one side drops the other, which still receives from it). Node order is the
caller's choice (shuffle first for a random shape).
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence

__all__ = [
    "Grudge",
    "between",
    "bisect",
    "bridge",
    "complete",
    "describe",
    "halves",
    "isolate",
    "majorities_ring",
    "merge",
    "one_way",
    "reachable",
]

Grudge = dict[str, frozenset[str]]


def complete(components: Iterable[Collection[str]]) -> Grudge:
    """Every node drops every node outside its own component."""
    components = [frozenset(c) for c in components]
    everyone = frozenset().union(*components)
    return {node: everyone - component for component in components for node in component}


def one_way(receivers: Collection[str], senders: Collection[str]) -> Grudge:
    """`receivers` drop everything `senders` send; `senders` still receive from them."""
    return {node: frozenset(senders) for node in receivers}


def bisect(nodes: Sequence[str]) -> tuple[list[str], list[str]]:
    """The nodes cut in two; the first half is the smaller one."""
    middle = len(nodes) // 2
    return list(nodes[:middle]), list(nodes[middle:])


def halves(nodes: Sequence[str]) -> Grudge:
    return complete(bisect(nodes))


def isolate(node: str, nodes: Sequence[str]) -> Grudge:
    """`node` alone on one side, every other node together on the other."""
    if node not in nodes:
        raise ValueError(f"{node!r} is not one of {list(nodes)}")
    return complete([[node], [n for n in nodes if n != node]])


def majorities_ring(nodes: Sequence[str]) -> Grudge:
    """Nodes on a ring, each seeing those within distance k, where 2k + 1 is the smallest
    odd number reaching a majority: every node sees a majority, each a different one
    (from 4 nodes on; with 3 or fewer, everyone sees everyone)."""
    n = len(nodes)
    majority = n // 2 + 1
    k = majority // 2
    grudge = {}
    for i, node in enumerate(nodes):
        grudge[node] = frozenset(other for j, other in enumerate(nodes)
                                 if min((i - j) % n, (j - i) % n) > k)
    return grudge


def bridge(nodes: Sequence[str]) -> Grudge:
    """Two halves that cannot see each other, and the middle node that sees both."""
    if len(nodes) < 3:
        raise ValueError("a bridge needs at least three nodes")
    middle = len(nodes) // 2
    left, right = nodes[:middle], nodes[middle + 1:]
    grudge = complete([left, right])
    grudge[nodes[middle]] = frozenset()
    return grudge


def between(side: Collection[str], other: Collection[str]) -> Grudge:
    """Cut `side` from `other` in both directions; links within each side and to any other
    node stay open."""
    if set(side) & set(other):
        raise ValueError(f"sides overlap: {sorted(set(side) & set(other))}")
    grudge = {node: frozenset(other) for node in side}
    grudge.update({node: frozenset(side) for node in other})
    return grudge


def merge(*grudges: Mapping[str, Collection[str]]) -> Grudge:
    """The union: a node drops whatever any of the grudges makes it drop."""
    merged: dict[str, frozenset[str]] = {}
    for grudge in grudges:
        for node, dropped in grudge.items():
            merged[node] = merged.get(node, frozenset()) | frozenset(dropped)
    return merged


def reachable(grudge: Mapping[str, Collection[str]], source: str, target: str) -> bool:
    """Whether a connection from `source` to `target` gets through: neither drops the other."""
    return (source not in grudge.get(target, ()) and target not in grudge.get(source, ()))


def describe(grudge: Mapping[str, Collection[str]]) -> dict[str, list[str]]:
    """The grudge as history values show it: node -> sorted dropped nodes, empty ones left out."""
    return {node: sorted(dropped) for node, dropped in sorted(grudge.items()) if dropped}
