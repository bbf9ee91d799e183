"""Checking on Spark: the only package of `checker` that imports pyspark (in `session`).

`session` starts Spark with `checker` shipped to its executors; `jobs` checks histories
(and files of other formats) on it, or in the calling process when that is faster;
`keyed` distributes any KeyedChecker key by key (linearizability, and the queue analysis
that the queue, acks, elections and txn checkers share); `sources` reads a history given
as a path or as a URL the executors reach.
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
