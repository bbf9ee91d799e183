"""Where a history is: a path only the driver reads, or a URL every executor reaches."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

__all__ = ["HistorySource", "history_lines", "is_shared"]

URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")
HistorySource = str | os.PathLike[str]


def is_shared(source: HistorySource) -> bool:
    """A history given as a URL (`file://`, `hdfs://`, `s3a://`) is on storage every executor
    reaches: Spark's reader fetches it for the driver. Any other source is a path only the
    driver is assumed to see."""
    return isinstance(source, str) and URL.match(source) is not None


def history_lines(session: Any, source: HistorySource) -> list[bytes]:
    """The lines of a JSONL history on the driver, unparsed: read from its path, or fetched
    through Spark (`SparkContext.binaryFiles`) from its URL."""
    if not is_shared(source):
        return Path(source).read_bytes().split(b"\n")
    data: bytes = session.sparkContext.binaryFiles(source).values().first()
    return data.split(b"\n")
