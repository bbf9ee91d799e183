"""Consumer groups: the coordinator, its state machine and its `__consumer_offsets` storage."""

from broker.group.coordinator import GroupConfig, GroupCoordinator
from broker.group.store import OffsetsLog

__all__ = ["GroupConfig", "GroupCoordinator", "OffsetsLog"]
