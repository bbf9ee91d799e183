"""The ZooKeeper-era controller: one event queue, state machines, pure elections."""

from broker.controller.assignment import assign_replicas
from broker.controller.config import ControllerConfig
from broker.controller.controller import Controller
from broker.controller.election import ElectionResult

__all__ = ["Controller", "ControllerConfig", "ElectionResult", "assign_replicas"]
