"""What every nemesis is: the `Nemesis` protocol, and `BaseNemesis`, which most extend.

A nemesis claims the op fs it handles and completes each op it is given with what it
actually did: an info op whose value names the nodes acted on, "no-target" when there
was nothing to act on, or `{"skipped": reason}` when the run gives it nothing to act on
at all. The cluster it is handed is a running db (`nemesis.capabilities`).
"""

from __future__ import annotations

from typing import Any, Protocol

from nemesis.capabilities import Nodes

__all__ = ["NO_TARGET", "BaseNemesis", "Nemesis", "completed", "no_target", "skipped"]

NO_TARGET = "no-target"


class Nemesis(Protocol):
    """A fault injector: it claims the op `fs` it handles and returns each op completed
    with what it actually did."""

    fs: frozenset[str]

    def setup(self, cluster: Any) -> None: ...
    def invoke(self, cluster: Any, op: dict[str, Any]) -> dict[str, Any]: ...
    def teardown(self, cluster: Any) -> None: ...


class BaseNemesis:
    """A nemesis with nothing to set up or tear down; subclasses set `fs` and `invoke`."""

    fs: frozenset[str] = frozenset()

    def setup(self, cluster: Nodes) -> None:
        """Nothing to prepare."""

    def teardown(self, cluster: Nodes) -> None:
        """Nothing to undo."""

    def invoke(self, cluster: Any, op: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError(f"{type(self).__name__} handles no op {op.get('f')!r}")


def completed(op: dict[str, Any], value: Any) -> dict[str, Any]:
    """`op` completed as a nemesis op (type info) with `value`."""
    return {**op, "type": "info", "value": value}


def no_target(op: dict[str, Any]) -> dict[str, Any]:
    """`op` completed having found nothing to act on."""
    return completed(op, NO_TARGET)


def skipped(op: dict[str, Any], reason: str) -> dict[str, Any]:
    """`op` completed as a logged no-op, saying why."""
    return completed(op, {"skipped": reason})
