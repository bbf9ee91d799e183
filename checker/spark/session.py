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
def spark_session(master: str = DEFAULT_MASTER, app_name: str = "kchaos",
                  log: Path | None = None) -> Iterator[Any]:
    """A Spark session with `checker` shipped to its executors.

    A session that was already running, started by any thread, is reused as it is (the
    caller that started it shipped `checker` and stops it); otherwise it is stopped on exit.
    A local master's Python workers are started before the session is handed out.
    With `log`, a JVM this call starts writes its output (Spark's start-up lines, the JVM's
    warnings) there instead of to this process's terminal.
    """
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    already_running = _session_running()
    if log is not None and not already_running:
        _start_jvm(log)
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
            if master.startswith("local"):
                _start_python_workers(session.sparkContext)
            yield session
        finally:
            session.stop()


def _start_python_workers(context: Any) -> None:
    """Start a local master's Python workers, `checker` imported, before the first check
    needs them: Spark starts them with the first job, which then waits about 1.7 s. A
    cluster's executors may register late or never, so its session does not wait here."""
    slots = context.defaultParallelism
    context.parallelize(range(slots), slots).foreach(_import_checker)


def _import_checker(_: int) -> None:
    import checker.core  # noqa: F401 - the import is the work


def _start_jvm(log: Path) -> None:
    """Start the JVM that Spark's driver runs in, unless one runs, its output appended to
    `log` (pyspark's `popen_kwargs` of `launch_gateway`)."""
    from pyspark import SparkContext
    from pyspark.java_gateway import launch_gateway

    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return
        with open(log, "ab") as out:
            gateway = launch_gateway(popen_kwargs={"stdout": out, "stderr": out})
        SparkContext._ensure_initialized(gateway=gateway)


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
