"""The runtime layer: the plugin's runtime package, Python files only."""

from __future__ import annotations

from tests.support.job_trees import write
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
    paths = [f.path for f in scan_runtime_package(package).files]
    assert paths == [
        "vdk/plugin/ml_training/__init__.py",
        "vdk/plugin/ml_training/runtime/__init__.py",
        "vdk/plugin/ml_training/runtime/bootstrap.py",
        "vdk/plugin/ml_training/runtime/shims/cuda.py",
    ]
