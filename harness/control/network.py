"""The names and addresses of one run's private network, shared by the backends that build it.

A run owns one /24 of its backend's private /16 (`site`): the controlling host's bridge at
`.1`, node i at `.10+i`. Every name carries the run's prefix so two runs never collide.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar, Self

from harness.control.errors import UnknownNode

__all__ = ["FIRST_HOST", "RunNetwork"]

FIRST_HOST = 10


@dataclass(frozen=True)
class RunNetwork:
    """Names and addresses of one run; pure, serialisable."""

    site: ClassVar[str]

    prefix: str
    subnet: int
    nodes: tuple[str, ...]

    @classmethod
    def cidr_of(cls, subnet: int) -> str:
        return f"{cls.site}.{subnet}.0/24"

    @property
    def cidr(self) -> str:
        return self.cidr_of(self.subnet)

    @property
    def bridge(self) -> str:
        return f"{self.prefix}br"

    @property
    def gateway(self) -> str:
        return f"{self.site}.{self.subnet}.1"

    @property
    def table(self) -> str:
        return self.prefix

    def address(self, node: str) -> str:
        try:
            return f"{self.site}.{self.subnet}.{FIRST_HOST + self.nodes.index(node)}"
        except ValueError:
            raise UnknownNode(node) from None

    def to_json(self) -> dict:
        return {"prefix": self.prefix, "subnet": self.subnet, "nodes": list(self.nodes)}

    @classmethod
    def from_json(cls, data: Mapping) -> Self:
        return cls(data["prefix"], int(data["subnet"]), tuple(data["nodes"]))
