"""The house's rules, checked on the code as it stands (docs/architecture.md): no import circles between any
two modules of the package (imports inside functions count), no module over 500 lines unless its docstring
says why it reads better whole, and no two modules with one base name unless they are parallel
implementations of one interface; every import of the package resolves, also one inside a function. The
layers themselves are the import-linter contract of `make lint`."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

import grimp

PACKAGE = "vdk.plugin.ml_training"
ROOT = Path(__file__).resolve().parents[3] / "src" / "vdk" / "plugin" / "ml_training"
MAX_LINES = 500
WHOLE = "reads better whole"  # what the docstring of a longer module says, with why
PARALLEL = {"k8s/backends"}  # folders of parallel implementations of one interface


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan), each a circle of imports."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        for imported in graph.find_modules_directly_imported_by(module):
            if imported not in index:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in on_stack:
                low[module] = min(low[module], index[imported])
        if low[module] == index[module]:
            group = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.append(member)
                if member == module:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for module in sorted(graph.modules):
        if module not in index:
            visit(module)
    return groups


def test_no_module_imports_itself_back_through_others():
    graph = grimp.build_graph(PACKAGE, include_external_packages=False, cache_dir=None)
    assert _cycles(graph) == []


def test_the_circle_finder_finds_a_circle():
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="c")
    assert _cycles(graph) == []
    graph.add_import(importer="c", imported="a")
    assert _cycles(graph) == [["a", "b", "c"]]


def _modules() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_no_module_is_longer_than_one_job_needs():
    long = []
    for path in _modules():
        lines = len(path.read_text().splitlines())
        docstring = ast.get_docstring(ast.parse(path.read_text())) or ""
        if lines > MAX_LINES and WHOLE not in docstring:
            long.append(f"{path.relative_to(ROOT)} ({lines} lines)")
    assert long == [], f"split these by job, or say in the docstring why each {WHOLE}"


def test_no_two_modules_share_a_base_name():
    names = Counter(
        path.name
        for path in _modules()
        if path.name != "__init__.py" and str(path.parent.relative_to(ROOT)) not in PARALLEL
    )
    assert [name for name, count in names.items() if count > 1] == []


def _imported_names(path: Path) -> list[tuple[int, str, str]]:
    """(line, module, name) of every `from vdk.plugin.ml_training... import name` in a file, in functions too."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith(PACKAGE) and not node.level:
            found += [(node.lineno, node.module, alias.name) for alias in node.names]
    return found


def test_every_import_of_the_package_resolves_also_inside_functions():
    # An import inside a function (kept there so a command loads only what it needs) fails only when it runs:
    # a module moved or a name renamed must not leave one behind.
    import importlib

    roots = [ROOT, ROOT.parents[3] / "tests", ROOT.parents[3] / "benchmarks", ROOT.parents[3] / "functional_tests"]
    broken = []
    for path in sorted(p for root in roots for p in root.rglob("*.py")):
        for line, module, name in _imported_names(path):
            try:
                imported = importlib.import_module(module)
            except ImportError as e:
                broken.append(f"{path}:{line}: {module}: {e}")
                continue
            if not hasattr(imported, name) and importlib.util.find_spec(f"{module}.{name}") is None:
                broken.append(f"{path}:{line}: {module} has no {name}")
    assert broken == []
