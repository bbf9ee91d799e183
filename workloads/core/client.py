"""The client protocol and completion validation.

A client is Jepsen's: `open(test, node)` returns a client bound to one node (the
factory value itself stays unopened), `setup(test)` runs once before the workload
(topic creation), `invoke(test, op)` returns the op completed as `ok`, `fail` or
`info`, `teardown(test)` runs once after it, `close(test)` releases the client.
Clients only classify what their system told them; exceptions and timeouts become `info`
in the worker (`workloads.core.worker`), and `validate` checks every completion.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, Protocol

__all__ = ["CLIENT_LOGGERS", "Client", "InvalidCompletion", "OpType", "completed", "validate"]

OpType = Literal["ok", "fail", "info"]

# Client libraries log under these loggers (librdkafka through confluent-kafka's `logger`
# setting, kafka-python through its own), never to the terminal: the runner sends them to
# the run folder's clients.log.
CLIENT_LOGGERS = ("kchaos.clients", "kafka")


class Client(Protocol):
    def open(self, test: Any, node: str | None) -> Client: ...
    def setup(self, test: Any) -> None: ...
    def invoke(self, test: Any, op: Mapping[str, Any]) -> dict[str, Any]: ...
    def teardown(self, test: Any) -> None: ...
    def close(self, test: Any) -> None: ...


class InvalidCompletion(Exception):
    """A client returned something that is not a completion of the op it was given."""


def completed(op: Mapping[str, Any], kind: OpType, value: Any = None, **extra: Any
              ) -> dict[str, Any]:
    """The completion of `op`: same process and f, the given type and value, extra fields
    (an `error` of None is left out)."""
    done = {key: item for key, item in op.items() if key not in ("time", "index")}
    done.update(type=kind, value=value)
    done.update({key: item for key, item in extra.items() if item is not None})
    return done


def validate(invocation: Mapping[str, Any], completion: Any) -> dict[str, Any]:
    """The completion as a dict, or InvalidCompletion: type must be ok, fail or info;
    process and f must be the invocation's."""
    if not isinstance(completion, Mapping):
        raise InvalidCompletion(f"client returned {completion!r} for {invocation.get('f')!r}, "
                                "not an op")
    problems = []
    if completion.get("type") not in ("ok", "fail", "info"):
        problems.append(f"type {completion.get('type')!r} is not ok, fail or info")
    for name in ("process", "f"):
        if completion.get(name) != invocation.get(name):
            problems.append(f"{name} {completion.get(name)!r} is not the invocation's "
                            f"{invocation.get(name)!r}")
    if problems:
        raise InvalidCompletion("invalid completion: " + "; ".join(problems))
    return dict(completion)
