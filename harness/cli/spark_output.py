"""Where Spark's and its JVM's start-up output goes when a command checks on Spark without a
run folder to keep it (`check-history`, `check-lin`): a temporary file, not the terminal."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["spark_output"]


@contextmanager
def spark_output() -> Iterator[Path]:
    """A file for Spark's output: removed when the block ends well, kept and named on
    stderr when it raises (Spark's own lines may say why)."""
    descriptor, name = tempfile.mkstemp(prefix="kchaos-spark-", suffix=".log")
    os.close(descriptor)
    path = Path(name)
    try:
        yield path
    except BaseException:
        print(f"kchaos: Spark's output is kept in {path}", file=sys.stderr, flush=True)
        raise
    path.unlink(missing_ok=True)
