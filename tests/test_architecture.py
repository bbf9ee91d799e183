"""docs/architecture.md's dependency rules, checked on every module's imports (none up)."""

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
        found = {n for n in imports_of(path) if top(n) == "harness"}
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"
    for path in modules("harness/db") + modules("harness/control"):
        found = {n for n in imports_of(path) if top(n) in ("nemesis", "workloads", "checker")
                 or n.startswith(("harness.runner", "harness.test", "harness.config"))}
        found = {n for n in found if not n.startswith("nemesis.capabilities")}
        assert not found, f"{path.relative_to(ROOT)} imports {sorted(found)}"


def test_the_nemesis_protocols_import_nothing_of_the_project():
    names = imports_of(ROOT / "nemesis" / "capabilities.py")
    assert not {n for n in names if top(n) in PACKAGES}, sorted(names)


def test_the_runner_knows_no_db_workload_or_option_internals():
    names = imports_of(ROOT / "harness" / "runner.py")
    assert not {n for n in names if n.startswith(("harness.db.kchaos", "harness.db.cluster",
                                                  "harness.db.registry", "workloads.queue",
                                                  "harness.config"))}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
    """module -> the modules of PACKAGES it imports, lazy (function-level) and
    type-checking imports included: `import a.b` names the longest known module of `a.b`,
    `from a import b` the module `a.b` when there is one, else `a`."""
    paths = {module_name(path): path for package in PACKAGES for path in modules(package)}

    def known(name: str) -> str | None:
        parts = name.split(".")
        for end in range(len(parts), 0, -1):
            if ".".join(parts[:end]) in paths:
                return ".".join(parts[:end])
        return None

    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parent + ([node.module] if node.module else []))
                for alias in node.names:
                    targets.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in paths
                                else known(base))
        graph[name] = targets - {name, None}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import circle (a -> b -> ... -> a) per strongly connected set of modules."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[set[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.add(member)
                if member == node:
                    break
            if len(component) > 1:
                components.append(component)

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [circle_in(graph, component) for component in components]


def circle_in(graph: dict[str, set[str]], component: set[str]) -> list[str]:
    """A shortest path from the component's first module back to itself, inside it."""
    start = min(component)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        following = []
        for node in frontier:
            for target in sorted(graph[node] & component):
                if target == start:
                    return paths[node] + [start]
                if target not in paths:
                    paths[target] = paths[node] + [target]
                    following.append(target)
        frontier = following
    return sorted(component)


def test_the_cycle_finder_names_a_circle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    found = cycles(import_graph())
    assert not found, "import cycles: " + "; ".join(" -> ".join(c) for c in found)


def test_workload_families_import_one_way():
    """core <- groups <- kafka <- queue, transfer <- registry: a family imports only those
    to its left (and itself)."""
    below = {"core": set(), "groups": {"core"}, "kafka": {"core", "groups"},
             "queue": {"core", "groups", "kafka"},
             "transfer": {"core", "groups", "kafka", "queue"}}
    for path in modules("workloads"):
        parts = path.relative_to(ROOT / "workloads").with_suffix("").parts
        family = parts[0]
        if family not in below:
            continue
        for name in imports_of(path):
            inner = name.split(".")[1:2]
            if top(name) == "workloads" and inner and inner[0] in below:
                assert inner[0] in below[family] | {family}, \
                    f"{path.relative_to(ROOT)} imports {name}"
