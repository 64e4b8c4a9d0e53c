"""The job spec package stays a floor of its own: its modules import nothing of the rooms above it (k8s, image,
local, cli, ...), take each other's names directly (not through the package's face), and run in no circle."""

import ast
from pathlib import Path

import vdk.plugin.ml_training.job as job_package

PACKAGE = "vdk.plugin.ml_training"
JOB = f"{PACKAGE}.job"
JOB_DIR = Path(job_package.__file__).parent
# What job/ may import of the plugin: itself and the floors below it.
ALLOWED = ("errors", "units", "secret_patterns", "runtime", "vocabulary", "source", "job")


def imports_of(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of every import in `path`: `from m import n` -> (m, n); `import m` -> (m, None)."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found += [(node.module, alias.name) for alias in node.names]
        elif isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
    return found


def modules() -> dict[str, Path]:
    return {path.stem: path for path in sorted(JOB_DIR.glob("*.py")) if path.stem != "__init__"}


def test_no_module_of_job_imports_a_room_above_it():
    wrong = [
        f"{name}: {module}"
        for name, path in modules().items()
        for module, _ in imports_of(path)
        if module.startswith(PACKAGE + ".") and module.split(".")[3] not in ALLOWED
    ]
    assert not wrong, wrong


def test_modules_of_job_import_each_other_directly_not_through_the_face():
    through_face = [
        f"{name}: from {JOB} import {imported}"
        for name, path in modules().items()
        for module, imported in imports_of(path)
        if module == JOB and imported not in modules()  # `from ...job import teams` names a module
    ]
    assert not through_face, through_face


def test_the_face_exports_no_name_of_a_module_of_job():
    """`from vdk.plugin.ml_training.job import teams` must stay the module, not a function of the same name."""
    assert not set(job_package.__all__) & set(modules())


def test_no_import_circle_inside_job():
    graph = {
        name: {
            imported if module == JOB else module.rsplit(".", 1)[1]
            for module, imported in imports_of(path)
            if module == JOB or module.startswith(JOB + ".")
        }
        for name, path in modules().items()
    }
    done: set[str] = set()

    def visit(name: str, trail: tuple[str, ...]) -> None:
        assert name not in trail, " -> ".join((*trail, name))
        if name in done:
            return
        for other in graph.get(name, ()):
            visit(other, (*trail, name))
        done.add(name)

    for name in graph:
        visit(name, ())


def test_no_module_of_job_is_over_500_lines():
    long = {name: n for name, path in modules().items() if (n := len(path.read_text().splitlines())) > 500}
    assert not long, long
