"""The Spark session, with `checker` shipped to its executors, and Spark's failures."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

__all__ = ["DEFAULT_MASTER", "SparkJobFailed", "spark_failures", "spark_session"]

DEFAULT_MASTER = "local[*]"


@contextmanager
def spark_session(master: str = DEFAULT_MASTER, app_name: str = "kchaos") -> Iterator[Any]:
    """A Spark session with `checker` shipped to its executors.

    A session that was already running, started by any thread, is reused as it is (the
    caller that started it shipped `checker` and stops it); otherwise it is stopped on exit.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    already_running = _session_running()
    session = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", os.environ["SPARK_LOCAL_IP"])
        .config("spark.python.worker.reuse", "true")
        .getOrCreate()
    )
    if already_running:
        yield session
        return
    session.sparkContext.setLogLevel("ERROR")
    with tempfile.TemporaryDirectory(prefix="kchaos-spark-") as scratch:
        session.sparkContext.addPyFile(_zip_package(Path(scratch)))
        try:
            yield session
        finally:
            session.stop()


def _session_running() -> bool:
    """Whether a session runs in this process: active in this thread, or the default one
    another thread started (`getActiveSession` sees only this thread's)."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.sql import SparkSession

    try:
        SparkSession.active()
    except PySparkRuntimeError:
        return False
    return True


def _zip_package(directory: Path) -> str:
    package = Path(__file__).resolve().parents[1]  # checker, not checker/spark
    archive = shutil.make_archive(str(directory / "checker"), "zip", root_dir=package.parent,
                                  base_dir=package.name)
    return archive


class SparkJobFailed(RuntimeError):
    """A Spark job failed, e.g. because an executor could not read a shared history; the
    message is Spark's reason."""


@contextmanager
def spark_failures() -> Iterator[None]:
    """Spark's Java errors (py4j's, which carry the `java_exception`) as SparkJobFailed,
    with the first line of Spark's reason; any other error goes through."""
    try:
        yield
    except Exception as error:
        java = getattr(error, "java_exception", None)
        if java is None:
            raise
        raise SparkJobFailed(str(java.toString()).splitlines()[0]) from None
