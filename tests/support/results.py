"""Comparing checker results whatever the time they took."""

from __future__ import annotations

from typing import Any


def without_seconds(body: Any) -> Any:
    """A results document (dicts and lists) with every `seconds` field left out."""
    if isinstance(body, dict):
        return {k: without_seconds(v) for k, v in body.items() if k != "seconds"}
    if isinstance(body, list):
        return [without_seconds(v) for v in body]
    return body
