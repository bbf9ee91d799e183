"""The workloads `kchaos run --workload` knows: one line per workload."""

from __future__ import annotations

from workloads import queue
from workloads.core.part import WorkloadKind
from workloads.transfer import workload as transfer

__all__ = ["WORKLOADS"]

WORKLOADS: dict[str, WorkloadKind] = {
    "queue": queue.KIND,
    "transfer": transfer.KIND,
}
