"""The benchmarks that print targets decide their exit status from them: a missed target
exits 1, all met exit 0."""

from __future__ import annotations

import pytest

from bench import (
    cluster_lifecycle,
    harness_overhead,
    lin_vs_porcupine,
    linearizability,
    report,
    spark_checkers,
)
from bench.targets import Target, exit_status, missed


def test_a_target_is_a_bound_from_above_unless_at_least():
    assert Target("t", 10, 10).met
    assert not Target("t", 10.01, 10).met
    assert Target("t", 1.7, 1.7, "x", at_least=True).met
    assert not Target("t", 1.69, 1.7, "x", at_least=True).met


def test_exit_status_names_each_missed_target(capsys):
    assert exit_status([Target("fast", 1, 2)]) == 0
    assert exit_status([Target("fast", 1, 2), Target("slow", 3, 2, "MB")]) == 1
    captured = capsys.readouterr()
    assert "targets met: 1 of 2" in captured.out
    assert "MISSED slow: 3.000 MB (target <= 2 MB)" in captured.err


def _missed(targets: list[Target]) -> list[str]:
    return [target.figure for target in missed(targets)]


def test_linearizability_targets():
    met = dict(etcd_seconds=1.0, c50_ok_seconds=0.3, bad_seconds=50, bad_peak_mb=2000,
               bad_unknown=0, complete_seconds=10, spark_seconds=20)
    assert _missed(linearizability.targets(**met)) == []
    assert _missed(linearizability.targets(**{**met, "etcd_seconds": 1.2})) == [
        "etcd files together"]
    assert _missed(linearizability.targets(**{**met, "c50_ok_seconds": 0.4})) == ["c50-ok"]
    assert _missed(linearizability.targets(**{**met, "bad_seconds": 61})) == [
        "c50-bad --complete"]
    assert _missed(linearizability.targets(**{**met, "bad_peak_mb": 2049})) == [
        "c50-bad --complete peak memory"]
    assert _missed(linearizability.targets(**{**met, "bad_unknown": 1})) == [
        "c50-bad --complete keys unknown"]
    assert _missed(linearizability.targets(**{**met, "spark_seconds": 20.5})) == [
        "whole set --complete on Spark"]


def test_linearizability_without_spark_has_no_spark_target():
    figures = [t.figure for t in linearizability.targets(1, 0.3, 50, 2000, 0, 10)]
    assert "whole set --complete on Spark" not in figures


@pytest.mark.parametrize("seconds, status", [(9.9, 0), (10.1, 1)])
def test_report_target(seconds, status):
    assert exit_status(report.targets(seconds)) == status


@pytest.mark.parametrize("overhead, status", [(39.0, 0), (41.0, 1)])
def test_harness_overhead_target(overhead, status):
    assert exit_status(harness_overhead.targets(overhead)) == status


def test_cluster_lifecycle_targets_judge_the_median_round():
    assert _missed(cluster_lifecycle.targets([8, 9, 30], [1, 2, 9])) == []
    assert _missed(cluster_lifecycle.targets([8, 11, 12], [1, 2, 2])) == [
        "cluster up, median round"]
    assert _missed(cluster_lifecycle.targets([8, 9, 9], [1, 4, 4])) == [
        "cluster down, median round"]


@pytest.mark.parametrize("speedup, status", [(1.89, 0), (1.7, 0), (1.5, 1)])
def test_spark_checkers_target(speedup, status):
    assert exit_status(spark_checkers.targets(speedup)) == status


def _case(generated: bool) -> lin_vs_porcupine.Case:
    return lin_vs_porcupine.Case("c", [], "cas", [True], generated)


@pytest.mark.parametrize("ours, go, met", [
    (lin_vs_porcupine.Timing(0.4, ["valid"]), lin_vs_porcupine.Timing(0.1, ["valid"]), True),
    (lin_vs_porcupine.Timing(3.0, ["valid"]), lin_vs_porcupine.Timing(2.0, ["valid"]), True),
    (lin_vs_porcupine.Timing(5.0, ["valid"]), lin_vs_porcupine.Timing(2.0, ["valid"]), False),
    (lin_vs_porcupine.Timing(9.0, ["unknown"]), lin_vs_porcupine.Timing(2.0, ["valid"]), False),
    (lin_vs_porcupine.Timing(0.1, ["invalid"]), lin_vs_porcupine.Timing(0.1, ["valid"]), False),
])
def test_lin_vs_porcupine_generated_case_targets(ours, go, met):
    assert lin_vs_porcupine.judge(_case(True), ours, go)[0] is met


def test_lin_vs_porcupine_on_porcupines_files_ours_is_no_slower():
    go = lin_vs_porcupine.Timing(1.0, ["valid"])
    assert lin_vs_porcupine.judge(_case(False), lin_vs_porcupine.Timing(0.9, ["valid"]), go)[0]
    assert not lin_vs_porcupine.judge(_case(False), lin_vs_porcupine.Timing(1.1, ["valid"]), go)[0]
