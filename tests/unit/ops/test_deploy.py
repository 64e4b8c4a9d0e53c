"""What `vdk deploy`'s use cases (ops/deploy.py) refuse before any work, as a notebook calls them: a team
that cannot be a Kubernetes label value. (Plans, deploys and builds against a registry and the fake API
server: tests/integration/ops/test_deploy_api.py.)"""

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


def test_the_spec_of_a_deploy_reads_config_ini_once(tmp_path, monkeypatch):
    from vdk.plugin.ml_training.job import config_file
    from vdk.plugin.ml_training.job import read_job_config

    job = api_job(tmp_path, "python:3.11")
    (job / "config.ini").write_text((job / "config.ini").read_text() + "\n[vdk]\nml_training_namespace = ml-vdk\n")
    read = []
    original = config_file.read_config
    monkeypatch.setattr(config_file, "read_config", lambda job_dir: read.append(job_dir) or original(job_dir))
    spec = deploy_spec(job)  # its [vdk] section (the settings) and its [ml-training] keys (the spec)
    assert len(read) == 1 and spec.namespace == "ml-vdk"
    config = read_job_config(job)
    read.clear()
    assert deploy_spec(config) == spec and read == []  # a config.ini read already is not read again


def test_a_dry_run_s_plan_is_printed_not_executed(tmp_path, no_network):
    from tests.support.specs import PROVENANCE
    from vdk.plugin.ml_training.ops.deploy import execute
    from vdk.plugin.ml_training.ops.deploy import plan_deploy

    spec = deploy_spec(api_job(tmp_path, "python:3.11"))  # a base the table knows: nothing is read
    plan = plan_deploy(spec, provenance=PROVENANCE)  # quiet without a reporter
    assert plan.build is None and plan.changes is None and plan.target.client is None
    with pytest.raises(MLTrainingError, match="is a dry run's: no image was assembled and no cluster was checked"):
        execute(plan)
