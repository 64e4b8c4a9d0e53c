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
