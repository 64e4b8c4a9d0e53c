"""What the plugin's modules import, read from their source (lazy imports inside functions count too), and
the import circles among them: for the tests that keep the house's layers apart."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from collections.abc import Mapping
from pathlib import Path

from vdk.plugin.ml_training import errors

PACKAGE = "vdk.plugin.ml_training"
ROOT = Path(errors.__file__).parent


def module_name(source: Path) -> str:
    parts = list(source.relative_to(ROOT).with_suffix("").parts)
    return ".".join([PACKAGE, *(parts[:-1] if parts[-1] == "__init__" else parts)])


def is_module(name: str) -> bool:
    path = ROOT.joinpath(*name.split(".")[len(PACKAGE.split(".")) :])
    return name.startswith(PACKAGE + ".") and (path.with_suffix(".py").is_file() or path.is_dir())


def imported(source: Path) -> set[str]:
    """Every module `source` imports, anywhere in it (`from P import M` names the module P.M too)."""
    found = set()
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names if is_module(f"{node.module}.{a.name}"))
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def find_circles(graph: Mapping[str, Iterable[str]]) -> list[str]:
    """The circles of `graph` (a module -> the modules it imports), each as "a -> b -> a"."""
    found = []

    def visit(module: str, path: list[str]) -> None:
        for target in sorted(graph.get(module, ())):
            if target == path[0]:
                found.append(" -> ".join([*path, target]))
            elif target not in path:
                visit(target, [*path, target])

    for module in graph:
        visit(module, [module])
    return found


def circles(package: str) -> list[str]:
    """The import circles among the modules of `package`."""
    modules = {module_name(s): s for s in sources(package)}
    return find_circles(
        {name: {m for m in imported(source) if m in modules and m != name} for name, source in modules.items()}
    )
