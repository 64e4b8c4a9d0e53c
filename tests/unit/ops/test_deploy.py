"""What `vdk deploy`'s use cases (ops/deploy.py) refuse before any work, as a notebook calls them: a team
that cannot be a Kubernetes label value. (Plans, deploys and builds against a registry and the fake API
server: tests/integration/ops/test_deploy.py.)"""

from __future__ import annotations

import pytest

from tests.support.jobs import api_job
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops.deploy import deploy_spec

pytestmark = pytest.mark.usefixtures("isolated_environment")


def test_a_team_that_cannot_be_a_label_value_is_refused_before_any_work(tmp_path):
    job = api_job(tmp_path, "python:3.11")
    with pytest.raises(MLTrainingError, match="cannot be a Kubernetes label value"):
        deploy_spec(job, team="R&D/Vision")
