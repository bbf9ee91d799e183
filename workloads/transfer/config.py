"""What a transfer worker child is told first, whichever library runs it: its group
consumer's configuration, its transactional producer's settings (in the terms of the
child's library), and where each input key's outputs go."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from workloads.groups.consumer import MemberConfig

__all__ = ["TXN_BUDGET", "TransferConfig"]

TXN_BUDGET = 0.8  # of the op timeout, so the child answers before the parent gives up


@dataclass(frozen=True, kw_only=True)
class TransferConfig:
    """What a transfer worker needs: its group consumer's configuration (the input side),
    the transactional producer's settings (librdkafka's for the confluent child; the
    transactional id, transaction timeout and linger for the Java one), the output topic
    and, per input key, its output key and partition."""

    member: MemberConfig
    producer: Mapping[str, Any]
    output_topic: str
    outputs: Mapping[Any, tuple[Any, int]]

    @property
    def group(self) -> str:
        return self.member.group

    @property
    def op_timeout(self) -> float:
        return self.member.op_timeout

    def to_json(self) -> dict[str, Any]:
        return {"member": self.member.to_json(), "producer": dict(self.producer),
                "output_topic": self.output_topic,
                "outputs": [[key, out, partition] for key, (out, partition) in
                            self.outputs.items()]}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> TransferConfig:
        return cls(member=MemberConfig.from_json(raw["member"]), producer=raw["producer"],
                   output_topic=raw["output_topic"],
                   outputs={key: (out, partition) for key, out, partition in raw["outputs"]})
