"""Checking on Spark: the only package of `checker` that imports pyspark (in `session`).

`session` starts Spark with `checker` shipped to the executors; `jobs` checks histories
(and files of other formats) on it, or in the calling process when that is faster;
`keyed` distributes any KeyedChecker key by key; `queue` runs the queue analysis on the
executors, parsing each history there.
"""

from checker.spark.jobs import (
    IN_PROCESS_BYTES,
    check_files_on_spark,
    check_histories,
    check_histories_on_spark,
    check_history_on_spark,
    in_process,
    run_units,
)
from checker.spark.session import DEFAULT_MASTER, SparkJobFailed, spark_session

__all__ = [
    "DEFAULT_MASTER",
    "IN_PROCESS_BYTES",
    "SparkJobFailed",
    "check_files_on_spark",
    "check_histories",
    "check_histories_on_spark",
    "check_history_on_spark",
    "in_process",
    "run_units",
    "spark_session",
]
