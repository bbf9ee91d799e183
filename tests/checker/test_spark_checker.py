"""Linearizability through Spark: the same verdicts as in process, many files in one job."""

from __future__ import annotations

from pathlib import Path

import pytest

from checker.lin.files import check_files
from checker.spark import check_files_on_spark

pytestmark = pytest.mark.spark

DATA = Path(__file__).parent.parent / "data" / "porcupine"


def test_spark_gives_the_same_verdicts_as_the_calling_process(spark):
    paths = [str(p) for p in sorted(DATA.glob("jepsen/etcd_00*.log"))]
    paths += [str(DATA / "kv" / name) for name in ("c10-ok.txt", "c10-bad.txt", "c50-bad.txt")]
    paths.append(str(DATA / "jepsen" / "etcd_095.log"))
    on_spark = check_files_on_spark(spark, paths, complete=True)
    local = check_files(paths, complete=True)
    assert [r.valid for r in on_spark] == [r.valid for r in local]
    assert [r.error for r in on_spark] == [r.error for r in local]
    by_name = {Path(r.path).name: r for r in on_spark}
    c50 = by_name["c50-bad.txt"]
    assert len(c50.partition_results) == 10
    assert all(p.valid is False for p in c50.partition_results)
    assert by_name["etcd_095.log"].error.endswith("empty history: no operations")


def test_spark_enforces_the_budget_inside_each_task(spark):
    from checker.lin.search import Budget

    [result] = check_files_on_spark(spark, [str(DATA / "kv" / "c50-bad.txt")], complete=True,
                                    budget=Budget(max_configurations=50))
    assert result.valid in (False, "unknown")
    reasons = {p.reason for p in result.partition_results if p.valid == "unknown"}
    assert reasons and all("memo budget exhausted" in r for r in reasons)


def test_cli_runs_on_spark_by_default(tmp_path, spark, capsys):
    from harness.cli import main

    out = tmp_path / "r.json"
    code = main(["check-lin", "--spark-master", "local[2]", "--json", str(out),
                 str(DATA / "kv" / "c01-ok.txt"), str(DATA / "kv" / "c01-bad.txt")])
    assert code == 1
    assert "2 file(s): 1 valid, 1 invalid" in capsys.readouterr().out


def test_the_shared_session_survives_the_cli(spark):
    assert spark.sparkContext.parallelize([1, 2, 3]).sum() == 6
