"""The dependency layer before anything is resolved: a requirements.txt that asks for nothing (comments and
blank lines) gives no layer. (Real uv resolving wheels: tests/integration/image/test_dependency_layer.py.)"""

from __future__ import annotations

from tests.support.jobs import write_job
from vdk.plugin.ml_training.image import dependency_layer
from vdk.plugin.ml_training.image.base_facts import base_info
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.job import load_job_spec

PYTORCH_BASE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"


def test_no_requirements_no_layer(tmp_path):
    files = {"train.py": "if __name__ == '__main__':\n    pass\n", "requirements.txt": "# nothing yet\n\n"}
    spec = load_job_spec(write_job(tmp_path, "job", ml=f"base_image = {PYTORCH_BASE}\n", files=files))
    assert dependency_layer.dependency_layer(spec, base_info(spec), Progress()) is None
