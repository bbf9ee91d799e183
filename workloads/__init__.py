"""Kafka clients that record histories, their generators and the interpreter."""

from workloads.client import Client, ClientOptions, outcome, validate
from workloads.part import Workload, WorkloadContext, WorkloadKind
from workloads.queue import QueueOptions, client_factory, queue_workload
from workloads.worker import Interpreter, Nemesis, NoopNemesis, Progress

__all__ = [
    "Client",
    "ClientOptions",
    "Interpreter",
    "Nemesis",
    "NoopNemesis",
    "Progress",
    "QueueOptions",
    "Workload",
    "WorkloadContext",
    "WorkloadKind",
    "client_factory",
    "outcome",
    "queue_workload",
    "validate",
]
