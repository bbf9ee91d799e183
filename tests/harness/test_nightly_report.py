"""`kchaos nightly-report` on the stored fixture night, its errors, and what a new night
records of the machine and the commit (harness.provenance)."""

from __future__ import annotations

import datetime
import json
import os
import shutil
import tomllib
from pathlib import Path

from harness.cli import main
from harness.nightly.plan import parse_plan
from harness.nightly.state import load_night, new_night
from harness.provenance import machine, source

ROOT = Path(__file__).resolve().parent.parent.parent
NIGHT = ROOT / "tests" / "data" / "nightly" / "2026-01-02"


def test_the_page_is_written_where_asked_naming_the_command(tmp_path, capsys):
    page = tmp_path / "results" / "detection.md"
    assert main(["nightly-report", str(NIGHT), "--markdown", str(page)]) == 0
    assert f"wrote {page}" in capsys.readouterr().out
    text = page.read_text()
    assert f"Written by `kchaos nightly-report {NIGHT} --markdown {page}`" in text
    assert "| unclean-isolated-leader | kchaos |" in text
    assert main(["nightly-report", str(NIGHT)]) == 0
    assert capsys.readouterr().out == text.replace(f" --markdown {page}", "")


def test_a_folder_that_is_no_checked_night_is_an_input_error(tmp_path, capsys):
    assert main(["nightly-report", str(tmp_path)]) == 3
    assert "not a night folder" in capsys.readouterr().err
    unchecked = tmp_path / "night"
    shutil.copytree(NIGHT, unchecked)
    state = json.loads((unchecked / "night.json").read_text())
    del state["outcomes"]
    state["checked"] = False
    (unchecked / "night.json").write_text(json.dumps(state))
    assert main(["nightly-report", str(unchecked), "--markdown", str(tmp_path / "p.md")]) == 3
    assert f"`kchaos nightly --night {unchecked}` finishes and checks it" in \
        capsys.readouterr().err
    assert not (tmp_path / "p.md").exists()


def test_a_new_night_records_this_machine_and_the_kchaos_commit(tmp_path):
    text = '[[cell]]\nname = "a"\n'
    night = new_night(tmp_path, parse_plan(tomllib.loads(text), "p.toml"), text,
                      datetime.datetime(2026, 1, 2))
    state = load_night(night.folder).state
    assert state["machine"]["cpus"] == os.cpu_count()
    assert state["machine"]["kernel"] == os.uname().release
    assert state["machine"]["memory_bytes"] > 2**28 and state["machine"]["cpu_model"]
    assert state["source"] == source() and len(state["source"]["commit"]) == 40
    assert machine() == state["machine"]
