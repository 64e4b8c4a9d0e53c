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


def test_a_sweep_is_said_as_its_trials_and_runs_as_an_indexed_job_whatever_the_backend(tmp_path):
    from tests.support.jobs import write_job
    from vdk.plugin.ml_training.cli.deploy_command import _shape
    from vdk.plugin.ml_training.job import load_job_spec
    from vdk.plugin.ml_training.ops.deploy_plan import offline_target
    from vdk.plugin.ml_training.ops.deploy_plan import where_it_runs

    sweep = "[ml-training.sweep]\nlr = 0.1, 0.01, 0.001, 0.0001\ntrials = 4\nparallel = 2\nmetric = loss\n"
    ml = {"args": "--lr ${lr}", "gpus_per_node": "1g.10gb", "backend": "pytorchjob"}
    spec = load_job_spec(write_job(tmp_path, "lr-sweep", ml=ml, extra=sweep))
    said: list[str] = []
    target = offline_target(spec, said.append)
    assert target.backend == "job" and said == []  # no note about `auto`: a sweep's trials are an Indexed Job
    assert "  sweep: 4 trials, 2 at a time, each on 1 node with a MIG slice 1g.10gb" in where_it_runs(spec, target)
    assert _shape(spec) == "sweep: 4 trials, 2 at a time, each on 1 node with a MIG slice 1g.10gb"
    plain = load_job_spec(write_job(tmp_path, "ddp", ml={"nodes": "2", "gpus_per_node": "8"}))
    assert _shape(plain) == "2 nodes with 8 GPUs each, 8 processes per node"
    one = load_job_spec(write_job(tmp_path, "one", ml={"gpus_per_node": "1"}))
    assert _shape(one) == "1 node with 1 GPU, 1 process per node"
