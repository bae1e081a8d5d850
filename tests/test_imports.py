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


def package_exports(modules: dict[str, str]) -> dict[tuple[str, str], str]:
    """(package, public name) -> the module that defines it, from the package's ``__init__``: its
    ``from graphtool.P.mod import name`` lines (those under ``TYPE_CHECKING`` too: a lazy package
    lists its names there for readers and type checkers) and a lazy package's ``_HOMES`` map."""
    found = {}
    for package, path in modules.items():
        if not path.endswith("__init__.py"):
            continue
        for node in ast.walk(ast.parse(open(path, encoding="utf-8").read())):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(package + "."):
                for alias in node.names:
                    found[(package, alias.asname or alias.name)] = node.module
            elif isinstance(node, ast.ImportFrom) and node.module == package:  # a submodule as a public name
                for alias in node.names:
                    found[(package, alias.asname or alias.name)] = f"{package}.{alias.name}"
            elif isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "_HOMES" for t in node.targets):
                for name, home in ast.literal_eval(node.value).items():
                    found[(package, name)] = f"{package}.{home}"
    return found


def import_graph() -> nx.DiGraph:
    """module -> every module it imports; a name taken from a package is an import of the module
    that defines it (so a lazy package's ``__getattr__`` hides no circle)."""
    modules = _modules()
    exports = package_exports(modules)
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
                names += [exports[(node.module, a.name)] for a in node.names if (node.module, a.name) in exports]
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


def _closed_packages(modules: dict[str, str]) -> dict[str, set[str]]:
    """Packages whose ``__init__`` declares ``__all__``: their public names, the only way in (a
    lazy package's ``__all__`` is computed: its names are then those its ``__init__`` exports)."""
    exports = package_exports(modules)
    closed = {}
    for module, path in modules.items():
        if path.endswith("__init__.py") and module not in PACKAGES:
            for node in ast.parse(open(path, encoding="utf-8").read()).body:
                if isinstance(node, ast.Assign) and any(getattr(t, "id", "") == "__all__" for t in node.targets):
                    try:
                        closed[module] = set(ast.literal_eval(node.value))
                    except ValueError:
                        closed[module] = {name for (package, name) in exports if package == module}
    return closed


def test_code_outside_a_package_imports_its_public_names() -> None:
    """``from graphtool.runtime import make_session``, never ``graphtool.runtime.session``: a
    package's modules are its own business, so moving a function between them touches only the
    package's ``__init__`` (tests may reach inside: they test the modules)."""
    modules = _modules()
    closed = _closed_packages(modules)
    wrong = []
    for module, path in modules.items():
        tree = ast.parse(open(path, encoding="utf-8").read())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [(node.module, a.name) for a in node.names]
            elif isinstance(node, ast.Import):
                names = [(a.name, None) for a in node.names]
            else:
                continue
            for target, name in names:
                for package, public in closed.items():
                    inside = module == package or module.startswith(package + ".")
                    if inside:
                        continue
                    if target.startswith(package + "."):
                        wrong.append(f"{module}: {target}")
                    elif target == package and name is not None and name not in public:
                        wrong.append(f"{module}: {package}.{name} (not in its __all__)")
    assert wrong == [], "imports past a package's public names:\n" + "\n".join(sorted(set(wrong)))


def test_new_rooms_are_closed() -> None:
    """The packages made by job (issue 31) each name their public names."""
    closed = _closed_packages(_modules())
    for package in ("runtime", "verify", "diff", "tune", "shapes", "compare", "rewrite"):
        assert f"graphtool.{package}" in closed, package
