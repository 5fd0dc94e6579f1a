"""No private name crosses a module (issue #41): a ``_name`` is its module's own. A name
another module needs is public where it is defined (or the two modules are one)."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

# perfgate's packages and where their sources live (pyproject.toml's package-dir)
ROOTS = {
    "perfgate": REPO / "src" / "perfgate",
    "perfgate.fixtures": REPO / "fixtures",
    "perfgate.suites": REPO / "suites",
}


def _modules() -> Iterator[tuple[str, bool, Path]]:
    """(module name, whether it is a package's ``__init__``, path) of every source file."""
    for package, root in ROOTS.items():
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            if "__pycache__" in parts:
                continue
            is_init = parts[-1] == "__init__"
            if is_init:
                parts = parts[:-1]
            yield ".".join((package, *parts)), is_init, path


def _imported_from(node: ast.ImportFrom, module: str, is_init: bool) -> str:
    """The absolute name of the module ``node`` imports from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_init else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def private_imports(source: str, module: str, is_init: bool = False) -> list[tuple[str, str]]:
    """(imported module, name) of each ``from perfgate... import _name`` of another module."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ImportFrom):
            continue
        origin = _imported_from(node, module, is_init)
        if origin != "perfgate" and not origin.startswith("perfgate."):
            continue
        for alias in node.names:
            name = alias.name
            if name.startswith("_") and not name.startswith("__") and origin != module:
                found.append((origin, name))
    return found


def test_no_private_name_is_imported_from_another_module():
    crossing = [
        f"{path.relative_to(REPO)}: from {origin} import {name}"
        for module, is_init, path in _modules()
        for origin, name in private_imports(path.read_text(encoding="utf-8"), module, is_init)
    ]
    assert not crossing, (
        "private names imported across modules (make them public where they are defined, "
        "or merge the modules):\n" + "\n".join(crossing)
    )


def test_the_check_sees_what_it_looks_for():
    """The walk finds the sources, and the check catches absolute and relative imports of
    private names while leaving public names, dunders and other packages alone."""
    modules = {module for module, _, _ in _modules()}
    assert {"perfgate.cli.main", "perfgate.stats", "perfgate.fixtures.gate"} <= modules
    source = (
        "from perfgate.gate.creep import _hidden, shown\n"
        "from .draw import _Legend\n"
        "from . import _sibling\n"
        "from perfgate import __version__\n"
        "from os import _exit\n"
    )
    assert private_imports(source, "perfgate.render.plots.charts") == [
        ("perfgate.gate.creep", "_hidden"),
        ("perfgate.render.plots.draw", "_Legend"),
        ("perfgate.render.plots", "_sibling"),
    ]
    package = "from .project import _x\nfrom perfgate.cli import _y\n"
    assert private_imports(package, "perfgate.cli", is_init=True) == [
        ("perfgate.cli.project", "_x")
    ]
