"""Every detection cell of the shipped suites has a control: a cell of the same suite that
must find nothing and whose options differ from the cell's in exactly one key."""

from __future__ import annotations

from typing import Any

import pytest

from harness.nightly.plan import Cell, PlanError, load_plan, parse_plan, suite_path, suites


def flat(options: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Options with tables opened: broker_config's keys as `broker_config.KEY`."""
    out: dict[str, Any] = {}
    for key, value in options.items():
        if isinstance(value, dict):
            out.update(flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def differing(a: Cell, b: Cell) -> list[str]:
    left, right = flat(a.options), flat(b.options)
    return sorted(k for k in left.keys() | right.keys() if left.get(k) != right.get(k))


@pytest.mark.parametrize("suite", suites())
def test_each_control_differs_from_its_cell_in_one_key_and_must_find_nothing(suite):
    plan = load_plan(suite_path(suite))
    for control in (c for c in plan.cells if c.control_of is not None):
        assert control.expect.valid, f"{control.name} is a control but expects an anomaly"
        cells = [c for c in plan.cells if c.label == control.control_of]
        assert cells, f"{control.name}: no cell {control.control_of}"
        for cell in (c for c in cells if c.db == control.db):
            assert len(differing(cell, control)) == 1, (
                f"{control.name} differs from {cell.name} in {differing(cell, control)}")
            assert cell.needs == control.needs, f"{control.name} needs other faults"


@pytest.mark.parametrize("suite", ["detection", "versions", "kraft"])
def test_every_detection_cell_has_a_control(suite):
    plan = load_plan(suite_path(suite))
    controlled = {(c.control_of, c.db) for c in plan.cells if c.control_of is not None}
    missing = [c.name for c in plan.cells
               if not c.expect.valid and (c.label, c.db) not in controlled]
    assert not missing


def plan_of(*cells: dict[str, Any]) -> dict[str, Any]:
    return {"name": "p", "defaults": {"time_limit": 10}, "cell": list(cells)}


def test_a_control_of_no_cell_or_of_itself_is_refused():
    with pytest.raises(PlanError, match="control_of names no cell of the plan: 'nope'"):
        parse_plan(plan_of({"name": "a", "control_of": "nope"}), "p.toml")
    with pytest.raises(PlanError, match="control_of must name another cell"):
        parse_plan(plan_of({"name": "a", "control_of": "a"}), "p.toml")


def test_cells_of_one_compare_name_form_a_table_and_a_bad_name_is_refused():
    plan = parse_plan(plan_of({"name": "a", "compare": "modes"}, {"name": "b"},
                              {"name": "c", "compare": "modes"}), "p.toml")
    assert [(c.label, c.compare) for c in plan.cells] == [("a", "modes"), ("b", None),
                                                          ("c", "modes")]
    assert plan.cells[0].to_json()["compare"] == "modes"
    with pytest.raises(PlanError, match="cell a.compare must be a plain name"):
        parse_plan(plan_of({"name": "a", "compare": "two words"}), "p.toml")


def test_the_versions_suite_compares_the_three_metadata_modes_on_one_schedule():
    cells = [c for c in load_plan(suite_path("versions")).cells if c.compare == "modes"]
    assert [c.label for c in cells] == ["modes-zookeeper", "modes-kraft", "modes-kraft-elr"]
    assert {c.faults for c in cells} == {("shrink-isr-kill-leader",)}
    assert [c.zookeepers for c in cells] == [1, 0, 0]
    assert all(c.expect.valid for c in cells)


def test_db_defaults_apply_to_that_dbs_cells_only():
    plan = parse_plan({"name": "p", "defaults": {"time_limit": 10, "zookeepers": 1},
                       "db_defaults": {"kafka": {"kafka_version": "3.9.1"}},
                       "cell": [{"name": "a", "dbs": ["kchaos", "kafka"]},
                                {"name": "b", "dbs": ["kafka"],
                                 "options": {"kafka_version": "2.8.2"}}]}, "p.toml")
    by_name = {cell.name: cell for cell in plan.cells}
    assert "kafka_version" not in by_name["a.kchaos"].options
    assert by_name["a.kafka"].options["kafka_version"] == "3.9.1"
    assert by_name["a.kafka"].zookeepers == 1
    assert by_name["b.kafka"].options["kafka_version"] == "2.8.2", "a cell's options win"
    with pytest.raises(PlanError, match="db_defaults must be tables"):
        parse_plan({"name": "p", "db_defaults": 3, "cell": [{"name": "a"}]}, "p.toml")
