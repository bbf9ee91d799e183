"""`kchaos check RUN_DIR...` and `kchaos check-history FILE...`: a night of runs checked in
one Spark job, each run's results written as when it is checked alone."""

from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import pytest

from harness import exit_codes
from harness.cli import main
from harness.runner import check_run
from tests.support.results import without_seconds

pytestmark = pytest.mark.spark

DATA = Path(__file__).parent.parent / "data"
RUNS = ("queue-valid", "queue-anomalies", "queue-unknown")



def copy_store(target: Path) -> Path:
    for run in RUNS:
        shutil.copytree(DATA / "store" / run, target / run, symlinks=True)
    return target


def results(run: Path) -> dict:
    return without_seconds(json.loads((run / "latest" / "results.json").read_text()))


def test_many_runs_in_one_job_are_each_checked_as_alone(spark, tmp_path, capsys):
    together, alone = copy_store(tmp_path / "together"), copy_store(tmp_path / "alone")
    broken = together / RUNS[0] / "latest" / "history.jsonl"
    broken.write_text(broken.read_text().replace('"index": 7,', '"index": 70,', 1))
    code = main(["check", *(str(together / run) for run in RUNS), "--spark-master", "local[2]"])
    assert code == exit_codes.ERROR
    assert f"{broken.resolve()}:8: index 70 where 7 was expected" in capsys.readouterr().out
    assert not (together / RUNS[0] / "latest" / "results.json").exists()
    for run in RUNS[1:]:
        checked = check_run((alone / run / "latest").resolve(), "local[2]", out=io.StringIO())
        assert results(together / run) == results(alone / run), run
        assert checked.exit_code in (exit_codes.INVALID, exit_codes.UNKNOWN)
    assert main(["check", *(str(together / run) for run in RUNS[1:]),
                 "--spark-master", "local[2]"]) == exit_codes.INVALID


def test_a_shared_store_gives_the_same_results(spark, tmp_path):
    shared, sent = copy_store(tmp_path / "shared"), copy_store(tmp_path / "sent")
    for store, extra in ((shared, ["--shared-store"]), (sent, [])):
        assert main(["check", *(str(store / run) for run in RUNS), "--spark-master",
                     "local[2]", *extra]) == exit_codes.INVALID
    for run in RUNS:
        assert results(shared / run) == results(sent / run), run


def test_many_history_files_in_one_job(spark, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"index": 0, "time": 1, "type": "weird"}\n')
    files = [str(DATA / "queue" / "ok.jsonl"), str(DATA / "queue" / "lost-write-bad.jsonl"),
             (DATA / "queue" / "duplicate-bad.jsonl").resolve().as_uri(), str(bad)]
    out = tmp_path / "results.json"
    assert main(["check-history", *files, "--spark-master", "local[2]", "--json",
                 str(out)]) == exit_codes.ERROR
    assert f"{bad}:1" in capsys.readouterr().err
    bodies = json.loads(out.read_text())["files"]
    assert [body["file"] for body in bodies] == files
    assert [body.get("valid") for body in bodies] == [True, False, False, None]
    assert "duplicate" in bodies[2]["checkers"]["queue"]["anomalies"]
    assert bodies[3]["error"].startswith(f"{bad}:1")
    single = tmp_path / "single.json"
    assert main(["check-history", files[1], "--spark-master", "local[2]", "--json",
                 str(single)]) == exit_codes.INVALID
    assert without_seconds(json.loads(single.read_text())) == without_seconds(
        {k: v for k, v in bodies[1].items() if k != "file"})


def test_a_url_cannot_be_checked_in_process(capsys):
    url = (DATA / "queue" / "ok.jsonl").resolve().as_uri()
    assert main(["check-history", url, "--local"]) == exit_codes.ERROR
    assert "a URL is read by the Spark executors" in capsys.readouterr().err
