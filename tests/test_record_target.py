"""scripts/record_target.py: a make target's result as a row of a generated page, with
real make on a Makefile of the test's own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "record_target.py"
MAKEFILE = """\
good:
\t@echo "3 passed, 1 skipped in 0.50s"
\t@echo "====== 2 passed in 0.10s ======"
bad:
\t@echo "1 failed, 4 passed in 0.20s"
\t@exit 2
"""


def record(tmp_path: Path, *targets: str) -> subprocess.CompletedProcess:
    makefile = tmp_path / "Makefile"
    makefile.write_text(MAKEFILE)
    return subprocess.run([sys.executable, str(SCRIPT), *targets, "--page",
                           str(tmp_path / "targets.md"), "--make", f"make -s -f {makefile}",
                           "--logs", str(tmp_path / "logs")],
                          capture_output=True, text=True, timeout=60)


def rows(tmp_path: Path) -> list[str]:
    return [line for line in (tmp_path / "targets.md").read_text().splitlines()
            if line.startswith("| `make ")]


def test_a_row_per_target_with_its_counts_result_and_provenance(tmp_path):
    done = record(tmp_path, "good")
    assert done.returncode == 0, done.stderr
    assert "3 passed, 1 skipped in 0.50s" in done.stdout  # the output streams through
    [good] = rows(tmp_path)
    assert good.startswith("| `make good` | 20")
    assert " | passed | 0 s | 5 passed, 1 skipped |" in good
    assert " cores" in good and "Linux" in good
    page = (tmp_path / "targets.md").read_text()
    assert "scripts/record_target.py TARGET" in page
    assert "3 passed, 1 skipped" in (tmp_path / "logs" / "good.log").read_text()


def test_a_failed_target_fails_the_script_and_replaces_only_its_own_row(tmp_path):
    assert record(tmp_path, "good").returncode == 0
    before = rows(tmp_path)
    done = record(tmp_path, "bad")
    assert done.returncode == 2
    bad, good = rows(tmp_path)  # by target name
    assert good == before[0]
    assert "| **FAILED** (exit 2) |" in bad and bad.endswith("| 4 passed, 1 failed |")
    assert record(tmp_path, "bad", "good").returncode == 2
    assert len(rows(tmp_path)) == 2
