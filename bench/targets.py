"""What the benchmarks that print targets share: each figure beside its bound, and the exit
status they decide (0 when every target is met, 1 when one is missed)."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Target:
    """A figure a benchmark promises: `value` is at most `limit` (at least, with `at_least`)."""

    figure: str
    value: float
    limit: float
    unit: str = "s"
    at_least: bool = False

    @property
    def met(self) -> bool:
        return self.value >= self.limit if self.at_least else self.value <= self.limit

    def __str__(self) -> str:
        bound = ">=" if self.at_least else "<="
        return (f"{self.figure}: {self.value:.3f} {self.unit} "
                f"(target {bound} {self.limit:g} {self.unit})")


def missed(targets: Sequence[Target]) -> list[Target]:
    """The targets not met, in order."""
    return [target for target in targets if not target.met]


def exit_status(targets: Sequence[Target]) -> int:
    """Prints how many targets were met and each missed one; 1 if any was missed, else 0."""
    misses = missed(targets)
    print(f"\ntargets met: {len(targets) - len(misses)} of {len(targets)}")
    for target in misses:
        print(f"  MISSED {target}", file=sys.stderr)
    return 1 if misses else 0
