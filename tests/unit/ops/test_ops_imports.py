"""The use cases are the Python API: importing them needs no click, and they import nothing of the command
line; the backends (k8s, image, local) import neither; the modules of k8s/ and ops/ import one another
without circles (lazy imports inside functions count too)."""

from __future__ import annotations

import ast
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


def test_no_use_case_imports_click():
    assert [str(s) for s in sources("ops") if any(m.split(".")[0] == "click" for m in imported(s))] == []


def test_the_use_cases_import_nothing_of_the_command_line():
    found = {
        (source.stem, module)
        for source in sources("ops")
        for module in imported(source)
        if module == f"{PACKAGE}.cli" or module.startswith(f"{PACKAGE}.cli.")
    }
    assert found == set()


def test_the_backends_import_no_use_case_and_no_command_line():
    above = (f"{PACKAGE}.ops", f"{PACKAGE}.cli")
    found = [
        f"{source.relative_to(ROOT)} -> {module}"
        for package in ("k8s", "image", "local")
        for source in sources(package)
        for module in imported(source)
        if module in above or module.startswith(tuple(f"{p}." for p in above))
    ]
    assert found == []


def circles(package: str) -> list[str]:
    """The import circles among the modules of `package`, each as "a -> b -> a"."""
    modules = {module_name(s): s for s in sources(package)}
    graph = {name: {m for m in imported(source) if m in modules and m != name} for name, source in modules.items()}
    found = []

    def visit(module: str, path: list[str]) -> None:
        for target in sorted(graph[module]):
            if target == path[0]:
                found.append(" -> ".join([*path, target]))
            elif target not in path:
                visit(target, [*path, target])

    for module in graph:
        visit(module, [module])
    return found


def test_the_modules_of_k8s_and_ops_import_one_another_without_circles():
    assert circles("k8s") == [] and circles("ops") == []
