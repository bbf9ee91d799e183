"""Run kchaos commands in one Spark session, timing each (the session's start apart).

    python -m tests.support.spark_driver MASTER '[["check", "RUN"], ...]'

prints one JSON object: `start_seconds`, the seconds the session took to start on
MASTER, and `commands`, each command's exit code, output and seconds. Every command
runs through `harness.cli.main` in the session started here, which `spark_session`
reuses, so a test can run many commands on one Spark master for one start.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from typing import Any

from checker.spark import spark_session
from harness.cli import main as kchaos

__all__ = ["run_commands"]


def run_commands(commands: list[list[str]]) -> list[dict[str, Any]]:
    """Each command's exit code, stdout, stderr and seconds, run in this process."""
    ran = []
    for argv in commands:
        out, err = io.StringIO(), io.StringIO()
        started = time.monotonic()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = kchaos(argv)
        ran.append({"argv": argv, "code": code, "out": out.getvalue(), "err": err.getvalue(),
                    "seconds": time.monotonic() - started})
    return ran


def main(argv: list[str]) -> int:
    master, commands = argv[0], json.loads(argv[1])
    started = time.monotonic()
    with spark_session(master, app_name="kchaos-tests"):
        start_seconds = time.monotonic() - started
        ran = run_commands(commands)
    print(json.dumps({"start_seconds": start_seconds, "commands": ran}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
