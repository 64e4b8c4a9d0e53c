"""The runtime package's modules import one another without circles (lazy imports inside functions
count too), and none takes another's `_private` names: what one module uses of another is public."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.source_imports import find_circles
from vdk.plugin.ml_training.runtime import protocol

PACKAGE = "vdk.plugin.ml_training.runtime"
RUNTIME = Path(protocol.__file__).parent


def module_of(source: Path) -> str:
    """`source`'s name inside the runtime package, dotted (`steps`, `virtual_gpu.devices`, `virtual_gpu` for its
    `__init__`; the runtime's own `__init__` is `__init__`)."""
    parts = source.relative_to(RUNTIME).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" and len(parts) > 1 else parts)


def runtime_imports(source: Path, modules: set[str]) -> dict[str, set[str]]:
    """The runtime modules `source` imports (anywhere in it) -> the names it takes from each; `from P import M`
    of a module M of the runtime's package P is an import of P.M."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(source.read_text(), str(source))):
        if isinstance(node, ast.ImportFrom) and (
            node.module == PACKAGE or (node.module or "").startswith(PACKAGE + ".")
        ):
            assert node.module is not None
            base = node.module[len(PACKAGE) + 1 :]
            for alias in node.names:
                sub = f"{base}.{alias.name}" if base else alias.name
                if sub in modules or not base:
                    found.setdefault(sub, set())
                else:
                    found.setdefault(base, set()).add(alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.setdefault(alias.name[len(PACKAGE) + 1 :], set())
    found.pop(module_of(source), None)
    return found


def graph() -> dict[str, dict[str, set[str]]]:
    sources = sorted(RUNTIME.rglob("*.py"))
    modules = {module_of(source) for source in sources}
    return {module_of(source): runtime_imports(source, modules) for source in sources}


def test_the_graph_names_modules_of_sub_packages_by_their_dotted_name():
    assert {"virtual_gpu", "virtual_gpu.devices"} <= set(graph())
    assert "virtual_gpu.devices" in graph()["virtual_gpu.objects"]


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
