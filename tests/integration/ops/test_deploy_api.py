"""`vdk deploy`'s use cases through the Python API (ops/deploy.py), as a notebook or a CI step calls them:
the plan of a dry run is what `vdk deploy --dry-run` prints, and contacts nothing; a deploy and a build
against a real registry process and the fake API server return what was pushed and created. Settings come
from the environment as for `vdk`."""

from __future__ import annotations

import pytest
import yaml

from tests.support.jobs import api_job
from tests.support.recorder import Recorder
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.ops.deploy import build
from vdk.plugin.ml_training.ops.deploy import deploy
from vdk.plugin.ml_training.ops.deploy import deploy_spec
from vdk.plugin.ml_training.ops.deploy import plan_deploy

pytestmark = pytest.mark.usefixtures("isolated_environment")


def test_the_plan_of_a_dry_run_is_what_vdk_deploy_dry_run_prints_and_contacts_nothing(tmp_path, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", "127.0.0.1:9/nothing-listens-here")
    job = api_job(tmp_path, "python:3.11")
    told = Recorder()
    plan = plan_deploy(deploy_spec(job, backend="pytorchjob"), reason="why not", reporter=told)
    notes = told.notes
    assert list(yaml.safe_load_all(plan.to_yaml())) == plan.manifests
    assert [m["kind"] for m in plan.manifests] == ["PyTorchJob", "ConfigMap"]
    assert plan.image.reference.startswith("127.0.0.1:9/nothing-listens-here/api-job:")  # from the environment
    assert plan.target.namespace == "ml" and plan.target.client is None
    assert any(n.startswith("Image for job api-job") for n in notes) and any("Where it runs:" in n for n in notes)
    assert fake.requests == []
    printed = vdk("deploy", "-p", str(job), "--dry-run", "--backend", "pytorchjob", "-r", "why not")
    assert printed.exit_code == 0, printed.output
    shown = list(yaml.safe_load_all(printed.stdout))
    assert [m["kind"] for m in shown] == [m["kind"] for m in plan.manifests]
    assert shown[0]["metadata"]["labels"].keys() == plan.manifests[0]["metadata"]["labels"].keys()
    assert shown[0]["spec"].keys() == plan.manifests[0]["spec"].keys()


def test_deploy_and_build_through_the_python_api(tmp_path, registry, base_image, cluster, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    spec = deploy_spec(api_job(tmp_path, base_image))
    told = Recorder()
    result = deploy(spec, reason="from a notebook", skip_smoke=True, reporter=told)
    notes = told.notes
    assert fake.run_objects() == sorted(result.created)
    data = result.to_dict()
    assert data["run"] == result.plan.run.name and data["backend"] == "pytorchjob" and data["namespace"] == "ml"
    assert data["image"].startswith(f"{registry.host}/team/api-job@sha256:")
    assert notes[0] == "Pre-flight: checking at once cluster, registry, base image, imports, dependencies"
    assert any(n.startswith("Cluster: ") for n in notes)
    assert told.named("changes") == [(result.changes,)]  # told before anything started
    (main,) = fake.stored("pytorchjobs")
    assert "from a notebook" in main["metadata"]["annotations"].values()
    image = build(spec, skip_smoke=True, reporter=told)
    assert image.reference.startswith(f"{registry.host}/team/api-job@sha256:")
    assert fake.run_objects() == sorted(result.created)  # a build starts nothing


def test_a_deploy_without_a_registry_says_how_to_set_one(tmp_path):
    spec = deploy_spec(api_job(tmp_path, "python:3.11"))
    with pytest.raises(MLTrainingError, match="no registry to push the image of api-job to"):
        deploy(spec)
