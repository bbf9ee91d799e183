"""Checking on Spark: the only package of `checker` that imports pyspark."""

from checker.spark.jobs import (
    DEFAULT_MASTER,
    SparkJobFailed,
    check_files_on_spark,
    check_histories_on_spark,
    check_history_on_spark,
    run_units,
    spark_session,
)

__all__ = [
    "DEFAULT_MASTER",
    "SparkJobFailed",
    "check_files_on_spark",
    "check_histories_on_spark",
    "check_history_on_spark",
    "run_units",
    "spark_session",
]
