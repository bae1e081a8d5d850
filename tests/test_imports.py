"""The module graph has no import circles: a module imports only from the floors below it.

Every ``import``/``from … import`` counts, at module level and inside functions (a lazy import
is still a dependency; only ``if TYPE_CHECKING:`` blocks are skipped, being types, not code).
"""

from __future__ import annotations

import ast
import os

import networkx as nx

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PACKAGES = {"graphtool": os.path.join(ROOT, "graphtool"), "graphtool.passes": os.path.join(ROOT, "passes")}


def _modules() -> dict[str, str]:
    found = {}
    for package, folder in PACKAGES.items():
        for dirpath, _, files in os.walk(folder):
            for name in files:
                if name.endswith(".py"):
                    rel = os.path.relpath(os.path.join(dirpath, name), folder)[:-3].replace(os.sep, ".")
                    module = package if rel == "__init__" else f"{package}.{rel.removesuffix('.__init__')}"
                    found[module] = os.path.join(dirpath, name)
    return found


def _type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def import_graph() -> nx.DiGraph:
    modules = _modules()
    graph = nx.DiGraph()
    for module, path in modules.items():
        graph.add_node(module)
        tree = ast.parse(open(path, encoding="utf-8").read())
        skip = {id(n) for block in ast.walk(tree) if _type_checking(block) for n in ast.walk(block)}
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                if name in modules and name != module and not module.startswith(name + "."):
                    graph.add_edge(module, name)
    return graph


def test_no_import_cycles():
    graph = import_graph()
    assert len(graph) > 60
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert cycles == [], f"import circles: {cycles}"


def test_every_package_ships_in_the_wheel() -> None:
    """A sub-package missing from pyproject's ``packages`` works in an editable install and is
    absent from the wheel users install (graphtool.rewrite was, for a release)."""
    import tomllib

    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as f:
        listed = set(tomllib.load(f)["tool"]["setuptools"]["packages"])
    on_disk = set()
    for package, folder in PACKAGES.items():
        for dirpath, _, files in os.walk(folder):
            if "__init__.py" in files and "__pycache__" not in dirpath:
                rel = os.path.relpath(dirpath, folder)
                on_disk.add(package if rel == "." else f"{package}.{rel.replace(os.sep, '.')}")
    assert on_disk <= listed, f"packages missing from pyproject.toml: {sorted(on_disk - listed)}"
