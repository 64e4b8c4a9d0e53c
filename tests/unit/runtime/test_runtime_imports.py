"""The runtime package's modules import one another without circles (lazy imports inside functions
count too), and none takes another's `_private` names: what one module uses of another is public."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.source_imports import find_circles
from vdk.plugin.ml_training.runtime import protocol

PACKAGE = "vdk.plugin.ml_training.runtime"
RUNTIME = Path(protocol.__file__).parent


def runtime_imports(source: Path) -> dict[str, set[str]]:
    """The runtime modules `source` imports (anywhere in it) -> the names it takes from each."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.ImportFrom) and node.module == PACKAGE:
            for alias in node.names:
                found.setdefault(alias.name, set())
        elif isinstance(node, ast.ImportFrom) and (node.module or "").startswith(PACKAGE + "."):
            found.setdefault(node.module[len(PACKAGE) + 1 :], set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.setdefault(alias.name[len(PACKAGE) + 1 :], set())
    found.pop(source.stem, None)
    return found


def graph() -> dict[str, dict[str, set[str]]]:
    return {source.stem: runtime_imports(source) for source in sorted(RUNTIME.glob("*.py"))}


def test_no_runtime_module_imports_itself_through_others():
    assert find_circles({module: set(names) for module, names in graph().items()}) == []


def test_no_runtime_module_takes_private_names_of_another():
    taken = [
        f"{module} takes {target}.{name}"
        for module, targets in graph().items()
        for target, names in targets.items()
        for name in sorted(names)
        if name.startswith("_")
    ]
    assert taken == []


def test_every_runtime_module_imported_exists():
    modules = set(graph())
    missing = {f"{m} -> {t}" for m, targets in graph().items() for t in targets if t not in modules}
    assert missing == set()
