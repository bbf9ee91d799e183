"""Reading a stored run's history in tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["killed_by_nemesis", "nemesis_completions"]


def nemesis_completions(run: Path) -> list[dict[str, Any]]:
    """The nemesis's completions (`info` ops) in the run's history.jsonl."""
    ops = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    return [op for op in ops if op["process"] == "nemesis" and op["type"] == "info"]


def killed_by_nemesis(run: Path, node: str) -> bool:
    """Whether a `kill` of the nemesis killed the process on `node` (`{node: "killed"}`)."""
    return any(op["f"] == "kill" and isinstance(op["value"], dict)
               and op["value"].get(node) == "killed" for op in nemesis_completions(run))
