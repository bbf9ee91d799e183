"""The docs name what the code has: every fault and fault group on docs/faults.md, every
checker on docs/checkers.md. (Dead links, anchors and pages left out of mkdocs.yml's nav
fail the strict build in `make test`.)"""

from __future__ import annotations

import re
from pathlib import Path

from checker.registry import CHECKERS
from nemesis.package import FAULTS, GROUPS

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def named(page: str) -> set[str]:
    """Every name written as code (`name`) on a page."""
    return set(re.findall(r"`([^`\n]+)`", (DOCS / page).read_text()))


def test_every_fault_and_group_is_documented():
    missing = (set(FAULTS) | set(GROUPS)) - named("faults.md")
    assert not missing, f"docs/faults.md does not name {sorted(missing)}"


def test_every_checker_is_documented():
    missing = set(CHECKERS) - named("checkers.md")
    assert not missing, f"docs/checkers.md does not name {sorted(missing)}"



def test_figures_of_nights_are_generated_pages_not_typed_into_other_pages():
    pages = [ROOT / "README.md", *(p for p in DOCS.rglob("*.md") if "results" not in p.parts)]
    for page in pages:
        text = page.read_text()
        assert not re.search(r"the night `store/nightly/", text), \
            f"{page.relative_to(ROOT)} cites a night of the git-ignored store"
        assert "| seeds found |" not in text, \
            f"{page.relative_to(ROOT)} types a night's table: `kchaos nightly-report` writes it"
    for page in DOCS.glob("results/*.md"):
        assert "Written by" in page.read_text() or "written by a command" in page.read_text()
