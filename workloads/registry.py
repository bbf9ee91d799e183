"""The workloads `kchaos run --workload` knows: one line per workload."""

from __future__ import annotations

from workloads import queue, transfer
from workloads.part import WorkloadKind

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, WorkloadKind] = {
    "queue": queue.KIND,
    "transfer": transfer.KIND,
}
