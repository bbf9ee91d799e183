"""A night's figures page (reports.figures) from the stored fixture night
(tests/data/nightly/make.py): where they came from, and each cell's figures."""

from __future__ import annotations

import json
from pathlib import Path

from reports.figures import describe_machine, describe_source, night_markdown

NIGHT = Path(__file__).resolve().parent.parent / "data" / "nightly" / "2026-01-02"


def state() -> dict:
    return json.loads((NIGHT / "night.json").read_text())


def test_the_page_says_which_night_machine_commit_and_command_it_came_from():
    page = night_markdown(state(), "kchaos nightly-report N --markdown P", "N")
    assert page.startswith("# Nightly results: figures\n")
    assert "Written by `kchaos nightly-report N --markdown P`, nothing typed by hand." in page
    assert "- night: `N`, plan `figures`: 4 cells, 8 runs" in page
    assert "- started: 2026-01-02T01:00:00, runs took 5 minutes" in page
    assert ("- machine: 2 cores (Example CPU @ 2.00GHz), 8.0 GiB, Linux 6.1.0-example"
            in page)
    assert "- kchaos commit: `0123456789ab`" in page
    assert "- every cell: `nodes=3`; `time_limit=20`; `zookeepers=1`" in page
    assert "- verdict: **3 of 4 cells met**" in page


def rows(page: str, first: str) -> list[list[str]]:
    """The rows of the table whose header starts with `first`, split into cells."""
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"| {first} |"))
    body = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        body.append([cell.strip() for cell in line.strip("|").split(" | ")])
    return body


def test_detection_and_valid_cells_carry_the_nights_own_figures():
    page = night_markdown(state(), "c", "n")
    detection = rows(page, "cell")
    assert detection[0][:2] == ["unclean-isolated-leader", "kchaos"]
    assert detection[0][2].startswith("`nemesis=shrink-isr-isolate-leader`; `broker_config=")
    # lost sends at 7 s and 10 s, the fault at 12 s, the loss shown by the end at 19.5 s
    assert detection[0][4:] == ["2/2", "0", "7.5 s", "7.5 s", "met"]
    assert detection[1][:3] == ["kip101-before-fix", "kafka 0.10.2.2",
                                "`nemesis=strand-follower`; `acks=all`"]
    assert detection[1][4:] == ["1/2", "0", "7.5 s", "7.5 s", "met"]
    valid = rows(page[page.index("## Valid cells"):], "cell")
    assert [row[0] for row in valid] == ["safe-acks-all", "safe-flushed"]
    assert valid[0][4:] == ["2/2", "0", "1.0", "75.0%", "met"]
    assert valid[1][4] == "1/2" and valid[1][-1] == "**NOT MET**"
    assert ("## Cells not met\n\n- `safe-flushed.kchaos`: 1 of 2 conclusive runs not valid; "
            "INVALID: lost-write 2") in page


def test_a_night_from_before_provenance_says_so():
    old = {k: v for k, v in state().items() if k not in ("machine", "source")}
    page = night_markdown(old, "c", "n")
    assert "- machine: not recorded" in page and "- kchaos commit: not recorded" in page
    assert describe_source({"commit": "f" * 40, "dirty": True}) == \
        "`ffffffffffff` + uncommitted changes"
    assert describe_machine({"cpus": 4, "memory_bytes": None, "kernel": "6.1"}) == \
        "4 cores, ? GiB, Linux 6.1"


def test_cells_of_one_compare_name_are_shown_side_by_side():
    night = state()
    night["cells"][2]["compare"] = night["cells"][3]["compare"] = "modes"
    for cell, figures in zip(night["cells"][2:], [(4.25, 9), (None, 3)], strict=True):
        night["outcomes"][cell["name"]].update(median_failover_s=figures[0],
                                               median_idle_s=figures[1])
    page = night_markdown(night, "c", "n")
    assert "## Side by side: modes" in page
    table = rows(page[page.index("## Side by side: modes"):], "cell")
    assert [row[0] for row in table] == [night["cells"][2]["label"], night["cells"][3]["label"]]
    assert table[0][4:6] == ["4.2 s", "9 s"] and table[1][4:6] == ["-", "3 s"]
    assert "## Side by side" not in night_markdown(state(), "c", "n")
