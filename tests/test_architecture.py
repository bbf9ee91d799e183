"""DESIGN.md's dependency arrows, checked on the imports of every module (nothing points up)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("broker", "harness", "nemesis", "workloads", "checker", "reports")
THIRD_PARTY = {
    "broker": {"kazoo", "kafka", "crc32c"},
    "checker": {"edn_format", "pyspark"},
}


def imports_of(path: Path) -> set[str]:
    """Every module name `path` imports (absolute imports; relative ones resolved)."""
    tree = ast.parse(path.read_text(), str(path))
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def top(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("package", ["broker", "checker"])
def test_broker_and_checker_import_only_themselves_the_stdlib_and_their_libraries(package):
    allowed = {package} | THIRD_PARTY[package] | set(sys.stdlib_module_names) | {"__future__"}
    for path in modules(package):
        outside = {name for name in imports_of(path) if top(name) not in allowed}
        assert not outside, f"{path.relative_to(ROOT)} imports {sorted(outside)}"


def test_only_checker_spark_imports_pyspark():
    for path in modules("checker"):
        uses = any(top(name) == "pyspark" for name in imports_of(path))
        assert not uses or path.parent.name == "spark", path


def test_the_history_imports_nothing_else_of_checker():
    for path in modules("checker/history"):
        found = {n for n in imports_of(path) if top(n) == "checker"
                 and n != "checker.history" and not n.startswith("checker.history.")}
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"


def test_nothing_imports_the_command_line():
    for package in PACKAGES:
        for path in modules(package):
            if path.parent.name == "cli" and path.parent.parent.name == "harness":
                continue
            found = {n for n in imports_of(path) if n == "harness.cli" or
                     n.startswith("harness.cli.")}
            assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"


def test_workloads_take_only_the_history_module_from_checker():
    for path in modules("workloads"):
        names = {n for n in imports_of(path) if top(n) == "checker"}
        assert all(n == "checker.history" or n.startswith("checker.history.")
                   for n in names), path
        assert not {n for n in imports_of(path) if top(n) in ("harness", "nemesis", "reports")}


def test_lower_layers_do_not_import_upper_ones():
    rules = {
        "nemesis": {"workloads", "checker", "reports", "broker"},
        "reports": {"harness", "workloads", "nemesis", "broker"},
    }
    for package, forbidden in rules.items():
        for path in modules(package):
            found = {n for n in imports_of(path) if top(n) in forbidden}
            assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"
    for path in modules("nemesis"):
        found = {n for n in imports_of(path) if top(n) == "harness"
                 and not n.startswith("harness.control")}
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"
    for path in modules("harness/db") + modules("harness/control"):
        found = {n for n in imports_of(path) if top(n) in ("nemesis", "workloads", "checker")
                 or n.startswith(("harness.runner", "harness.test", "harness.config"))}
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"


def test_the_runner_knows_no_db_workload_or_option_internals():
    names = imports_of(ROOT / "harness" / "runner.py")
    assert not {n for n in names if n.startswith(("harness.db.kchaos", "harness.db.cluster",
                                                  "harness.db.registry", "workloads.queue",
                                                  "harness.config"))}
