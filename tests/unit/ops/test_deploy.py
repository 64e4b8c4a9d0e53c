"""`vdk deploy`'s use cases through the Python API (ops/deploy.py), as a notebook or a CI step calls them:
the plan of a dry run is what `vdk deploy --dry-run` prints, and contacts nothing; a deploy and a build
against a real registry process and the fake API server return what was pushed and created. Settings come
from the environment as for `vdk`."""

from __future__ import annotations

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops.deploy import deploy_spec

pytestmark = pytest.mark.usefixtures("isolated_environment")

TRAIN = """\
import torch

if __name__ == "__main__":
    torch.nn.Linear(4, 1)
"""


def job_dir(root, base_image: str, name: str = "api-job"):
    return write_job(
        root,
        name,
        team="ml-platform",
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\nnodes = 2\n"
        "gpus_per_node = 1\n",
        files={"train.py": TRAIN},
    )


def test_a_team_that_cannot_be_a_label_value_is_refused_before_any_work(tmp_path):
    job = job_dir(tmp_path, "python:3.11")
    with pytest.raises(MLTrainingError, match="cannot be a Kubernetes label value"):
        deploy_spec(job, team="R&D/Vision")
