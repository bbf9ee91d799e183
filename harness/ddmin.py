"""Delta debugging (Zeller and Hildebrandt, "Simplifying and Isolating Failure-Inducing
Input", 2002): the ddmin algorithm, over any list of items.

`ddmin(items, reproduces)` returns a 1-minimal sublist of `items` for which
`reproduces(sublist)` is true: removing any one item of it makes the failure go. It
assumes `reproduces(items)`; it splits the list into n chunks, tries each complement
(the list without one chunk; with n = 2 they are the chunks), then each chunk alone, keeps
the first that reproduces (n - 1 after a complement, n back to 2 after a chunk), else
doubles n, until n reaches the length. Complements go first (Zeller tries chunks first):
a failure that needs two or three faults is kept by a complement far more often than by
a chunk, and every question here is a cluster run. Each distinct sublist is asked about
once. `reproduces` may raise `Exhausted` (its budget is spent): the smallest reproducing
sublist found so far is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

__all__ = ["Exhausted", "ddmin"]

T = TypeVar("T")


class Exhausted(Exception):
    """Raised by a test function whose budget (runs, time) is spent."""


def ddmin(items: Sequence[T], reproduces: Callable[[list[T]], bool]) -> list[T]:
    asked: dict[tuple[int, ...], bool] = {}

    def test(positions: list[int]) -> bool:
        key = tuple(positions)
        if key not in asked:
            asked[key] = reproduces([items[p] for p in positions])
        return asked[key]

    positions = list(range(len(items)))
    n = 2
    try:
        while len(positions) >= 2:
            chunks = _split(positions, n)
            complements = [[p for p in positions if p not in chunk] for chunk in chunks]
            found = next((rest for rest in complements if n > 2 and test(rest)), None)
            if found is not None:
                positions, n = found, max(n - 1, 2)
                continue
            found = next((chunk for chunk in chunks if test(chunk)), None)
            if found is not None:
                positions, n = found, 2
                continue
            if n >= len(positions):
                break
            n = min(2 * n, len(positions))
    except Exhausted:
        pass
    return [items[p] for p in positions]


def _split(positions: list[int], n: int) -> list[list[int]]:
    """`positions` in `n` chunks of nearly equal length, in order."""
    size, extra = divmod(len(positions), n)
    chunks, start = [], 0
    for number in range(n):
        end = start + size + (1 if number < extra else 0)
        chunks.append(positions[start:end])
        start = end
    return chunks
