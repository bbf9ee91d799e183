"""A report in headless Chromium (Debian's `chromium`), with no network: the verdict is
shown and every image loaded."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from harness.store import run_files
from reports import write_report
from tests.support import requirements

FIXTURES = Path(__file__).parent.parent / "data" / "store"
CHROMIUM = shutil.which("chromium")

pytestmark = requirements.tools("chromium", package="chromium")


def chromium(profile: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}",
         "--virtual-time-budget=5000", *args],
        capture_output=True, text=True, timeout=120, check=True)


@pytest.mark.parametrize("run, verdict", [("queue-anomalies", "INVALID"),
                                          ("queue-valid", "VALID")])
def test_report_in_headless_chromium(tmp_path: Path, run: str, verdict: str) -> None:
    store = tmp_path / "store"
    shutil.copytree(FIXTURES, store, symlinks=True)
    report = write_report(run_files(store / run / "latest"))
    url = report.path.as_uri()
    dom = chromium(tmp_path / "profile", "--dump-dom", url).stdout
    assert f'<div class="verdict">{verdict}</div>' in dom
    assert 'data-images="loaded"' in dom, "an image did not load"
    assert dom.count("<img ") == len(report.plots) == 6
    shot = tmp_path / f"{run}.png"
    chromium(tmp_path / "profile", "--window-size=1280,2000", f"--screenshot={shot}", url)
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG") and len(data) > 50_000


def test_a_missing_image_is_detected(tmp_path: Path) -> None:
    store = tmp_path / "store"
    shutil.copytree(FIXTURES, store, symlinks=True)
    report = write_report(run_files(store / "queue-valid" / "latest"))
    (report.path.parent / "rate.png").unlink()
    dom = chromium(tmp_path / "profile", "--dump-dom", report.path.as_uri()).stdout
    assert 'data-images="broken"' in dom and "This image did not load." in dom
