"""The report's plot of node clocks: each moved node's offset over time, read from the
clock faults' completions, and drawn only for runs that moved a clock."""

from __future__ import annotations

import json
from pathlib import Path

from checker.history import Op, write_jsonl
from harness.store import run_files
from reports import write_report
from reports.plots import clock_offsets

S = 1_000_000_000


def nemesis(index: int, seconds: float, f: str, value, kind: str = "info") -> Op:
    return Op(index, int(seconds * S), kind, "nemesis", f, value, {})


def clock_history() -> list[Op]:
    return [
        Op(0, 0, "invoke", 0, "send", [["send", 0, 1]], {}),
        Op(1, int(0.1 * S), "ok", 0, "send", [["send", 0, [0, 1]]], {}),
        nemesis(2, 1.0, "clock-bump", {"seconds": 7200}),
        nemesis(3, 1.1, "clock-bump", {"node": "n2", "offset_ms": 7_200_000}),
        nemesis(4, 4.0, "clock-reset", None),
        nemesis(5, 4.1, "clock-reset", {"reset": ["n2"]}),
        nemesis(6, 5.0, "clock-strobe", {"seconds": 30}),
        nemesis(7, 8.0, "clock-strobe", {"node": "n1", "flips": 15, "offset_ms": 30_000,
                                         "period_ms": 200}),
        nemesis(8, 9.0, "heal", None),
        nemesis(9, 9.1, "heal", {"healed": True}),
    ]


def test_offsets_follow_bumps_strobes_and_resets():
    assert clock_offsets(clock_history()) == {
        "n2": [(1.1, 7200.0), (4.1, 0.0)],
        "n1": [(5.0, 30.0), (8.0, 0.0)]}
    assert clock_offsets(clock_history()[:2]) == {}


def test_a_run_that_moved_clocks_gets_the_clock_plot(tmp_path: Path) -> None:
    run = tmp_path / "clocks" / "20260101T000000"
    run.mkdir(parents=True)
    write_jsonl(clock_history(), run / "history.jsonl")
    (run / "test.json").write_text(json.dumps({"name": "clocks", "seed": 1}))
    report = write_report(run_files(run))
    assert "clocks.png" in {plot.file for plot in report.plots}
    assert (run / "clocks.png").read_bytes().startswith(b"\x89PNG")
