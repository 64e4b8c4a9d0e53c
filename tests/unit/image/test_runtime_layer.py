"""The runtime layer: the plugin's packages the pods run, Python files only."""

from __future__ import annotations

from tests.support.job_trees import write
from vdk.plugin.ml_training.image.runtime_layer import PACKAGES
from vdk.plugin.ml_training.image.runtime_layer import runtime_package_dir
from vdk.plugin.ml_training.image.runtime_layer import scan_runtime_package


def test_runtime_package_takes_only_python_files(tmp_path):
    package = tmp_path / "ml_training"
    write(package, "__init__.py")
    write(package, "job.py")  # not part of the runtime
    write(package, "runtime/__init__.py")
    write(package, "runtime/bootstrap.py")
    write(package, "runtime/shims/cuda.py")
    write(package, "runtime/README.md")
    write(package, "runtime/__pycache__/bootstrap.cpython-311.pyc")
    write(package, "datafetch/__main__.py")
    write(package, "vocabulary/wire.py")  # what runtime/ and datafetch/ import
    write(package, "k8s/client.py")  # not part of the runtime
    paths = [f.path for f in scan_runtime_package(package).files]
    assert paths == [
        "vdk/plugin/ml_training/__init__.py",
        "vdk/plugin/ml_training/datafetch/__main__.py",
        "vdk/plugin/ml_training/runtime/__init__.py",
        "vdk/plugin/ml_training/runtime/bootstrap.py",
        "vdk/plugin/ml_training/runtime/shims/cuda.py",
        "vdk/plugin/ml_training/vocabulary/wire.py",
    ]


def test_what_the_pods_run_imports_nothing_outside_the_runtime_layer():
    import ast

    package = runtime_package_dir()
    shipped = {f.path.removeprefix("vdk/plugin/ml_training/").split("/")[0] for f in scan_runtime_package().files}
    outside = []
    for name in PACKAGES:
        for path in sorted((package / name).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("vdk.plugin.ml_training."):
                    room = node.module.split(".")[3]
                    if room not in shipped:
                        outside.append(f"{path.relative_to(package)}: {node.module}")
    assert outside == []
