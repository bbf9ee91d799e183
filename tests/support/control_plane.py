"""A fake data plane that records the control requests it receives."""

from __future__ import annotations


class Recorder:
    """A fake data plane that records what it receives."""

    def __init__(self) -> None:
        self.received: list = []

    async def leader_and_isr(self, request):
        self.received.append(request)
        return {(s.topic, s.partition): 0 for s in request.partition_states}

    async def update_metadata(self, request):
        self.received.append(request)
        return 0

    async def stop_replica(self, request):
        self.received.append(request)
        return {tp: 0 for tp in request.partitions}
