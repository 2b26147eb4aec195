"""Reading a project's imports from its source, importing nothing (for the floor and purity tests).

``direct_imports`` lists what a module imports where it runs: at module level or inside its
functions, ``from package import module`` as the submodule, relative imports resolved, and
``if TYPE_CHECKING:`` blocks left out (they never run).
"""

from __future__ import annotations

import ast
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def source_file(module: str, root: Path = ROOT) -> Path | None:
    """The file of a project module (a package's ``__init__.py``) below ``root``, or None if it is not one."""
    base = root.joinpath(*module.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def _is_type_checking_block(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _import_nodes(tree: ast.AST):
    """Import statements that run when the module is imported or its functions are called."""
    for node in ast.iter_child_nodes(tree):
        if _is_type_checking_block(node):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _import_nodes(node)


def _absolute(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    base = package[: len(package) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def with_parents(module: str) -> list[str]:
    """Importing ``a.b.c`` runs ``a`` and ``a.b`` first."""
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


@cache
def direct_imports(module: str, root: Path) -> frozenset[str]:
    path = source_file(module, root)
    assert path is not None, module
    tree = ast.parse(path.read_text(), str(path))
    names: set[str] = set()
    for node in _import_nodes(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
            continue
        target = _absolute(node, module, path.name == "__init__.py")
        names.add(target)
        # ``from package import name`` imports the submodule ``package.name`` when there is one.
        names.update(f"{target}.{alias.name}" for alias in node.names if source_file(f"{target}.{alias.name}", root))
    return frozenset(names)
