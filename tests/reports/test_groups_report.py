"""The consumer-group timeline of the report: a plot and a section per group, only for
histories with groups."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from checker.core import compose_results
from checker.groups.checker import GroupsChecker
from checker.history import load_history, write_jsonl
from harness.store import run_files
from reports import write_report
from reports.groups import group_timelines
from tests.support.group_histories import GroupBuilder

FIXTURES = Path(__file__).parent.parent / "data" / "store"


def subscribe_run(directory: Path) -> Path:
    """A run folder of a two-member group across a partition and one rebalance."""
    b = GroupBuilder()
    for offset, value in enumerate((10, 11, 12, 13)):
        b.at(0.1 * offset).send("w", offset % 2, value, offset // 2)
    b.at(1).subscribe(1, [b.entry([0, 1], 1, "consumer-1-aaaa")])
    b.poll(1, {0: [(0, 10), (1, 12)], 1: [(0, 11)]})
    b.commit(1, {0: 2, 1: 1})
    b.nemesis("start-partition", {"n1": ["n2"]})
    b.at(3).subscribe(2)
    b.poll(1, rebalances=[b.entry([0, 1], 1, "consumer-1-aaaa", revoke=True)])
    b.at(4).poll(1, rebalances=[b.entry([0], 2, "consumer-1-aaaa")])
    b.poll(2, {1: [(1, 13)]}, rebalances=[b.entry([1], 2, "consumer-2-bbbb")])
    b.commit(2, {1: 2})
    b.at(6).nemesis("stop-partition", None)
    b.at(8).committed("final", {0: 2, 1: 2})
    test = {"name": "groups-demo", "seed": 1, "sub_via": "subscribe",
            "commit": "after-process"}
    result = compose_results({"groups": GroupsChecker().check(test, b.ops, test)})
    directory.mkdir(parents=True)
    write_jsonl(b.ops, directory / "history.jsonl")
    (directory / "test.json").write_text(json.dumps(test))
    (directory / "results.json").write_text(json.dumps(result.to_json()))
    return directory


def test_subscribe_history_gets_a_group_plot_and_section(tmp_path: Path) -> None:
    run = subscribe_run(tmp_path / "groups-demo" / "20250101T000000")
    report = write_report(run_files(run))
    page = report.path.read_text()
    assert report.verdict is True
    plot = run / "group-g0.png"
    assert plot.read_bytes().startswith(b"\x89PNG") and plot.stat().st_size > 10_000
    assert "group-g0.png" in {p.file for p in report.plots}
    assert 'id="groups"' in page and 'href="#groups"' in page and 'src="group-g0.png"' in page
    section = page[page.index('id="groups"'):]
    assert "Group g0" in section and "2 members, 2 rebalances, 4 ownership intervals" in section
    assert "<td>2</td><td>3.002</td><td>4.003</td><td>1.000</td><td>1, 2</td>" in section


def test_group_timeline_reads_the_ownership(tmp_path: Path) -> None:
    run = subscribe_run(tmp_path / "run")
    (timeline,) = group_timelines(load_history(run / "history.jsonl"))
    assert timeline.keys == (0, 1) and timeline.file == "group-g0.png"
    assert [r.generation for r in timeline.rebalances] == [1, 2]


def test_assign_mode_history_has_no_group_plot_or_section(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(FIXTURES, store, symlinks=True)
    report = write_report(run_files(store / "queue-valid" / "latest"))
    page = report.path.read_text()
    assert not list(report.path.parent.glob("group-*.png"))
    assert 'id="groups"' not in page and not any(p.file.startswith("group-")
                                                 for p in report.plots)
