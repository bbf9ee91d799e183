"""One key's dependency edges between committed ops, for the cycles of `checker.txn.checker`.

Edges, each from op a to op b:
  ww     a's send to the key is followed, at the next offset of the key's version order
         that a vertex sent, by b's send;
  wr     b polled a value that a sent;
  ww+wr  a's send is followed by sends of ops that are no vertex, one of which b polled:
         the path a -ww-> ... -wr-> b, contracted;
  rw     a is a transaction (f "txn"), b sent the key's first committed record after the
         highest offset a polled, and b's op began after a's completed: a did not see
         b's send because it was not there yet (an anti-dependency).
A poll reads on from its consumer's own position, as far as `max.poll.records` and the
fetch sizes take it, so that it did not see a record that may already have committed
orders nothing. That is all a plain poll op says, and it is no transaction, so it has no
rw edges; a transaction's poll does say more, but only about a record whose op began
after the transaction completed.

Vertices are the ops that can lie on a cycle: those that send and poll or send to several
keys ("linked"), transactions that poll (they may have rw edges out), and ops that an rw
edge points at. Ops that only send to one key are otherwise contracted out of the ww
chains, and polls of ops that neither send nor are transactions add no edge, so a
million-op history of plain sends and polls keeps a graph of its transactions only. A
plain send that an rw edge points at stays a vertex rather than being contracted: that
costs one vertex per transaction's poll of a key at most, where contracting it would
draw an edge from the transaction to every poller of the plain sends after it.

Edges are flat ints (`EDGE_FIELDS` an edge) with their values (from, to) beside them, as
`KeyReport` stores them.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from typing import Any

from checker.queue.events import Event
from checker.queue.log import KeyLog

__all__ = ["EDGE_FIELDS", "KIND_NAMES", "RW", "WR", "WW", "WW_WR", "key_edges"]

WW, WR, WW_WR, RW = 0, 1, 2, 3
KIND_NAMES = {WW: "ww", WR: "wr", WW_WR: "ww+wr", RW: "rw"}
EDGE_FIELDS = 5  # source op, target op, kind, offset at the source, offset at the target


def key_edges(log: KeyLog, committed_reads: Sequence[Event]
              ) -> tuple[array, list[tuple[Any, Any]]]:
    """One key's ww, wr, ww+wr and rw edges, and their values; `committed_reads` are the
    READ events of ok ops and of info ops proven committed."""
    edges: array = array("q")
    values: list[tuple[Any, Any]] = []
    if not any(w.linked for w in log.committed) and not any(e[7] for e in committed_reads):
        return edges, values
    seen: set[tuple[int, int, int]] = set()

    def link(source: int, target: int, kind: int, offsets: tuple[int, int],
             pair: tuple[Any, Any]) -> None:
        if source != target and (source, target, kind) not in seen:
            seen.add((source, target, kind))
            edges.extend((source, target, kind, *offsets))
            values.append(pair)

    chain = sorted((w for w in log.committed if w.offset is not None), key=lambda w: w.offset)
    chain_offsets = [w.offset for w in chain]
    vertices = {id(w) for w in log.committed if w.linked}
    for index, _, _, _, pairs, _, _, atomic in committed_reads:
        if not (atomic and pairs):
            continue
        offset, value = max(pairs, key=lambda pair: pair[0])
        at = bisect.bisect_right(chain_offsets, offset)
        if at < len(chain) and chain[at].invoke > index:
            b = chain[at]
            vertices.add(id(b))
            link(index, b.index, RW, (offset, b.offset), (value, b.value))
    anchor = None  # the latest vertex's write of the chain
    carried: dict[Any, Any] = {}  # value of an op that is no vertex -> the anchor before it
    for w in chain:
        if id(w) in vertices:
            if anchor is not None:
                link(anchor.index, w.index, WW, (anchor.offset, w.offset),
                     (anchor.value, w.value))
            anchor = w
        elif anchor is not None:
            carried[w.value] = anchor
    committed = {id(w) for w in log.committed}
    for index, _, _, _, pairs, _, writes, atomic in committed_reads:
        if not (writes or atomic):
            continue
        for offset, value in pairs:
            w = log.writer.get(value)
            if w is None or id(w) not in committed:
                continue
            if id(w) in vertices:
                link(w.index, index, WR, (offset, offset), (value, value))
            elif value in carried:
                a = carried[value]
                link(a.index, index, WW_WR, (a.offset, offset), (a.value, value))
    return edges, values
