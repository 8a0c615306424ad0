"""The shape of the grading code (issue 28), read from its imports and definitions.

These read the project's own source (never a student's): which module imports which, including imports
inside functions, which names cross a module boundary, and how long the grader's top-level function is.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("course", "autograder")


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))}


def imported(name: str, path: Path) -> set[str]:
    """The project modules ``name`` imports anywhere in its body (functions included)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            base = base[:len(base) - node.level + 1] if node.level else []
            stem = ".".join(base + ([node.module] if node.module else []))
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in MODULES else stem for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in MODULES:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def test_no_module_imports_another_that_imports_it_back():
    graph = {name: imported(name, path) for name, path in MODULES.items()}
    cycles, done = [], set()

    def visit(node: str, stack: list[str]) -> None:
        if node in stack:
            cycles.append(stack[stack.index(node):] + [node])
            return
        if node in done:
            return
        for nxt in sorted(graph[node]):
            visit(nxt, stack + [node])
        done.add(node)

    for name in sorted(graph):
        visit(name, [])
    # A package's __init__ gathers its modules: an edge into a package from its own module is the loop to avoid.
    assert not cycles, "import loops:\n" + "\n".join(" -> ".join(c) for c in cycles[:10])


def test_no_private_name_crosses_a_module_boundary():
    crossing = []
    for name, path in MODULES.items():
        tree = ast.parse(path.read_text())
        project_aliases = set()
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").split(".")[0] in PACKAGES):
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        crossing.append(f"{name}: from {'.' * node.level}{node.module or ''} import {alias.name}")
                    else:
                        project_aliases.add(alias.asname or alias.name)
            elif isinstance(node, ast.Import):
                project_aliases.update((a.asname or a.name).split(".")[0] for a in node.names
                                       if a.name.split(".")[0] in PACKAGES)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in project_aliases
                    and node.attr.startswith("_") and not node.attr.startswith("__")):
                crossing.append(f"{name}:{node.lineno}: {node.value.id}.{node.attr}")
    # Only names that are modules of the project count: a class or function imported by name has private members.
    modules = {m.rpartition(".")[2] for m in MODULES} | set(PACKAGES)
    crossing = [c for c in crossing if "import" in c or c.split(": ", 1)[1].split(".")[0] in modules]
    assert not crossing, "private names used across modules:\n" + "\n".join(crossing)


@pytest.mark.parametrize("module, function, most", [("autograder.batch", "grade_all", 60)])
def test_the_grader_reads_as_named_stages(module, function, most):
    tree = ast.parse(MODULES[module].read_text())
    node = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == function)
    assert node.end_lineno - node.lineno + 1 <= most
