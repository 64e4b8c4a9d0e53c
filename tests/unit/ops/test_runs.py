"""The scope the runs' use cases (ops/) work in, as a notebook finds it: from a job directory its name,
team and namespace; a team named wins over the job's own. (The runs themselves, against the fake API
server: tests/integration/ops/test_runs_api.py.)"""

from __future__ import annotations

import pytest

from tests.support.specs import make_spec
from vdk.plugin.ml_training.ops.scope import find_scope

pytestmark = pytest.mark.usefixtures("isolated_environment")


def test_a_scope_from_a_job_directory_takes_its_name_team_and_namespace(tmp_path, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_TEAM_NAMESPACES", "vision:vision-ns, nlp:nlp-ns")
    spec = make_spec(tmp_path / "jobs", name="bert-ft", team="vision")
    scope = find_scope(job_path=spec.job_dir)
    assert (scope.job_name, scope.team.name, scope.namespace) == ("bert-ft", "vision", "vision-ns")
    other = find_scope("bert-ft", "nlp", spec.job_dir)  # a team named wins over the job's [owner] team
    assert (other.team.name, other.namespace) == ("nlp", "nlp-ns")
    monkeypatch.chdir(spec.job_dir)  # run in the job's directory: its name and team
    assert (find_scope().job_name, find_scope(default_team="nlp").team.name) == ("bert-ft", "nlp")


def _summary(name: str, phase: str, claim: str | None):
    from vdk.plugin.ml_training.k8s.runs.summary import RunSummary

    outputs = {"claim": claim, "directory": f"{name}/"} if claim else None
    return RunSummary(name, "mnist", None, "job", "ml", phase, None, None, None, None, None, None, outputs=outputs)


def test_a_run_continues_only_an_ended_run_that_kept_its_outputs_on_the_claim_it_writes_to():
    from vdk.plugin.ml_training.errors import MLTrainingError
    from vdk.plugin.ml_training.ops.runs import _can_continue

    done = _summary("mnist-k3x9p2qa", "Failed", "runs")
    _can_continue(done, done, "mnist")  # from its own manifests
    _can_continue(done, _summary("mnist-m7d1c0zz", "Succeeded", "runs"), "mnist")  # a later deploy's, same claim
    with pytest.raises(MLTrainingError, match="kept no outputs") as no_outputs:
        _can_continue(_summary("mnist-k3x9p2qa", "Failed", None), done, "mnist")
    assert "vdk execute --start -n mnist -i mnist-k3x9p2qa" in no_outputs.value.fix
    with pytest.raises(MLTrainingError, match="has not ended"):
        _can_continue(_summary("mnist-k3x9p2qa", "Running", "runs"), done, "mnist")
    with pytest.raises(MLTrainingError, match="on the same claim only") as elsewhere:
        _can_continue(done, _summary("mnist-m7d1c0zz", "Succeeded", "other"), "mnist")
    assert "--from mnist-k3x9p2qa` (without -i)" in elsewhere.value.fix
