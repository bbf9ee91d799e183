"""Checkers that read the cluster's controller event log: unclean elections and availability."""
