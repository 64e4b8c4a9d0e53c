"""The runs of a job through the Python API (ops/), as a notebook or a CI step calls it: no click, the real
`kubernetes` client and the HTTP-level fake API server. What a use case returns is what the command line
prints with -o json (`to_dict()`), and its notes go to the `say` it is given."""

from __future__ import annotations

import json

import pytest

from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.ops.scope import find_scope

pytestmark = pytest.mark.usefixtures("isolated_environment")

TEAM = "Vision Research"


@pytest.fixture
def runs(cluster, tmp_path, monkeypatch):
    """Two PyTorchJob runs of mnist-ddp of team Vision Research (oldest first), and the fake API server."""
    monkeypatch.chdir(tmp_path)  # not in a job directory
    fake, client = cluster(pytorchjob=True)
    spec = make_spec(tmp_path / "jobs", nodes="2", gpus_per_node="8")
    applied = []
    for suffix in ("aaaa0001", "aaaa0002"):
        run = make_run(spec, name=f"mnist-ddp-{suffix}")
        applied.append(client.apply(render_run(spec, IMAGE, run, "ml", "pytorchjob"))[0])
    return fake, [main["metadata"]["name"] for main in applied]


def cli_json(*args: str):
    done = vdk(*args, "-o", "json")
    assert done.exit_code == 0, done.output
    return json.loads(done.stdout)


def test_a_scope_from_a_job_directory_takes_its_name_team_and_namespace(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_TEAM_NAMESPACES", "vision:vision-ns, nlp:nlp-ns")
    spec = make_spec(tmp_path / "jobs", name="bert-ft", team="vision")
    scope = find_scope(job_path=spec.job_dir)
    assert (scope.job_name, scope.team.name, scope.namespace) == ("bert-ft", "vision", "vision-ns")
    other = find_scope("bert-ft", "nlp", spec.job_dir)  # a team named wins over the job's [owner] team
    assert (other.team.name, other.namespace) == ("nlp", "nlp-ns")
    monkeypatch.chdir(spec.job_dir)  # run in the job's directory: its name and team
    assert (find_scope().job_name, find_scope(default_team="nlp").team.name) == ("bert-ft", "nlp")
