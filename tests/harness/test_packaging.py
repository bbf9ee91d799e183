"""The wheel that SSH and Docker nodes install holds every module and the report's files."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
PACKAGES = ("broker", "checker", "harness", "nemesis", "reports", "workloads")


def test_the_wheel_holds_every_module_and_the_report_templates(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                    "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True)
    [wheel] = tmp_path.glob("kchaos-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    sources = {str(p.relative_to(ROOT)) for package in PACKAGES
               for p in (ROOT / package).rglob("*") if p.is_file()
               and "__pycache__" not in p.parts}
    assert sources - names == set()
    assert "reports/static/report.html" in names
