"""Faults and their schedules: partitions, process faults, packages of both."""

from nemesis.package import FAULTS, GROUPS, Package, compose, expand, noop, package

__all__ = ["FAULTS", "GROUPS", "Package", "compose", "expand", "noop", "package"]
