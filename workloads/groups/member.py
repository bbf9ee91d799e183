"""Subscribe-mode ops of one client process, over its consumer child.

A `GroupMember` is what a queue client (`workloads.kafka.client.QueueClient`) holds once
its `subscribe` op started a consumer child (`workloads.groups.child`) in the op's group,
running the `main` of the client's library member module. It
turns the ops of the groups history contract into child requests and their replies into
completions:

- `subscribe` -> ok with the op's value;
- `poll` -> `[["poll", {k: [[offset, value], ...]}]]`, with the before-process `commit`
  field and `unprocessed` records when the child reports them;
- `commit` (value {"k": next}) -> ok / fail / info as the child's commit came out;
- `crash` "abandon" -> SIGKILL the child (no leave: the coordinator drops the member after
  its session timeout); any other crash closes the consumer (it leaves the group); both
  complete as `info`.

Every completion carries `rebalances`, the callbacks that ran during the op (each with
the op's group, and its time moved from the child's CLOCK_MONOTONIC onto the history's
clock), when there were any. A child that does not answer, or answers an error, gives an
`info` completion; the worker then drops this process (`close` gives the child up to the
op timeout to leave its group, then kills it).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from workloads.core.client import completed
from workloads.groups.child import ChildGone, ConsumerChild, ConsumerChildren, MemberError
from workloads.groups.consumer import MemberConfig

__all__ = ["GroupMember", "normalise_key"]

REPLY_GRACE_SECONDS = 5.0


def normalise_key(key: Any) -> Any:
    """JSON object keys are strings: a key that spells an integer is that integer."""
    if isinstance(key, str) and key.lstrip("-").isdigit():
        return int(key)
    return key


class GroupMember:
    """A subscribed consumer of one client process; see the module docstring."""

    def __init__(self, children: ConsumerChildren, config: MemberConfig,
                 clock: Callable[[], int] | None, main: str | Sequence[str]) -> None:
        self.children = children
        self.config = config
        self.clock = clock
        self.child: ConsumerChild | None = children.start(config, main)
        self.timeout = config.op_timeout + REPLY_GRACE_SECONDS

    # -- times and callback entries --------------------------------------------------------

    def history_time(self, monotonic_ns: int) -> int:
        """A child's `time.monotonic_ns()` on the history's clock (ns since the test start)."""
        if self.clock is None:
            return monotonic_ns
        now = time.monotonic_ns()
        return monotonic_ns + self.clock() - now

    def rebalances(self, events: list[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
        entries = [{"time": self.history_time(event["time"]), "group": self.config.group,
                    "generation": event.get("generation"), "member": event.get("member"),
                    "assigned": list(event.get("assigned") or []),
                    "revoked": list(event.get("revoked") or []),
                    "lost": bool(event.get("lost"))} for event in events]
        return entries or None

    def _request(self, op: Mapping[str, Any], request: str, **fields: Any
                 ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """(the reply, None), or ({}, an info completion of `op`)."""
        if self.child is None:
            return {}, completed(op, "info", op.get("value"), error="no consumer child")
        try:
            reply = self.child.request(request, self.timeout, **fields)
        except MemberError as error:
            return {}, completed(op, "info", op.get("value"), error=f"indeterminate: {error}",
                                 rebalances=self.rebalances(error.events))
        except (ChildGone, TimeoutError) as error:
            return {}, completed(op, "info", op.get("value"), error=f"indeterminate: {error}")
        return reply, None

    # -- ops ---------------------------------------------------------------------------------

    def subscribe(self, op: Mapping[str, Any]) -> dict[str, Any]:
        reply, failed = self._request(op, "subscribe")
        if failed is not None:
            return failed
        return completed(op, "ok", op.get("value"), rebalances=self.rebalances(reply["events"]))

    def poll(self, op: Mapping[str, Any]) -> dict[str, Any]:
        reply, failed = self._request(op, "poll")
        if failed is not None:
            return failed
        result = reply["result"]
        reads = {key: pairs for key, pairs in result["reads"]}
        extra: dict[str, Any] = {"rebalances": self.rebalances(reply["events"]),
                                 "errors": ", ".join(dict.fromkeys(result["errors"])) or None}
        commit = result.get("commit")
        if commit is not None:
            extra["commit"] = {"offsets": {str(k): n for k, n in commit["offsets"]},
                               "type": commit["type"],
                               "time": self.history_time(commit["time"]),
                               **({"error": commit["error"]} if commit.get("error") else {})}
        if result.get("unprocessed"):
            extra["unprocessed"] = {str(k): offsets for k, offsets in result["unprocessed"]}
        return completed(op, "ok", [["poll", reads]], **extra)

    def commit(self, op: Mapping[str, Any]) -> dict[str, Any]:
        offsets = [[normalise_key(k), n] for k, n in op["value"].items()]
        reply, failed = self._request(op, "commit", offsets=offsets)
        if failed is not None:
            return failed
        result = reply["result"]
        return completed(op, result["type"], op["value"], error=result.get("error"),
                         rebalances=self.rebalances(reply["events"]))

    def crash(self, op: Mapping[str, Any]) -> dict[str, Any]:
        """Abandon (SIGKILL) or close the consumer; the crash completes as info."""
        child, self.child = self.child, None
        if child is None:
            return completed(op, "info", op.get("value"))
        self.children.release(child)
        if op.get("value") == "abandon":
            child.kill()
            return completed(op, "info", op.get("value"))
        reply = child.close(self.config.op_timeout)
        events = reply["events"] if reply is not None else []
        return completed(op, "info", op.get("value"), rebalances=self.rebalances(events),
                         error=None if reply is not None else "close failed: killed")

    def close(self) -> None:
        """Let the child go: it leaves its group, or is killed after the op timeout."""
        child, self.child = self.child, None
        if child is not None:
            self.children.release(child)
            child.close(self.config.op_timeout)
