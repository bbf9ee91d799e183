"""Kafka clients that record histories, their generators and the interpreter."""

from workloads.client import Client, ClientOptions, outcome, validate
from workloads.queue import QueueOptions, Workload, client_factory, queue_workload
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
    "client_factory",
    "outcome",
    "queue_workload",
    "validate",
]
