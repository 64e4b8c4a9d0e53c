"""The claims a job names, checked against the (fake) API server before anything is built."""

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.storage.claims import check_claims

MOUNTS = "[ml-training.mounts]\n/data = pvc:imagenet\n/text = pvc:corpus\n"


def spec_of(tmp_path, nodes="2"):
    return load_job_spec(write_job(tmp_path, "job", ml={"nodes": nodes, "output_pvc": "ml-outputs"}, extra=MOUNTS))


def test_every_claim_that_is_missing_is_named_with_where_it_is_configured(tmp_path, cluster):
    fake, client = cluster()
    fake.add_claim("imagenet")
    notes = []
    with pytest.raises(MLTrainingError) as info:
        check_claims(client, spec_of(tmp_path), notes.append)
    problem = info.value.problem
    assert "ml-outputs (output_pvc)" in problem and "corpus ([ml-training.mounts] /text)" in problem
    assert "imagenet" not in problem and "in namespace ml" in problem
    assert "kubectl get pvc -n ml" in info.value.fix
    claims = [p for (m, p, _) in fake.requests if "persistentvolumeclaims" in p]
    assert claims == [f"/api/v1/namespaces/ml/persistentvolumeclaims/{n}" for n in ("ml-outputs", "imagenet", "corpus")]


def test_claims_that_several_nodes_cannot_mount_together_are_noted(tmp_path, cluster):
    fake, client = cluster()
    fake.add_claim("ml-outputs", ("ReadWriteOnce",))
    fake.add_claim("imagenet", ("ReadOnlyMany",))
    fake.add_claim("corpus")
    notes = []
    check_claims(client, spec_of(tmp_path), notes.append)
    assert len(notes) == 1 and "ml-outputs (output_pvc) is ReadWriteOnce" in notes[0] and "ReadWriteMany" in notes[0]
    notes.clear()
    check_claims(client, spec_of(tmp_path / "one", nodes="1"), notes.append)
    assert notes == []  # one node: one machine mounts it


def test_a_user_who_may_not_read_claims_is_told_they_were_not_checked(tmp_path, cluster):
    _, client = cluster(forbidden={("get", "persistentvolumeclaims")})
    notes = []
    check_claims(client, spec_of(tmp_path), notes.append)
    assert len(notes) == 1 and "cannot be read here (`get persistentvolumeclaims`)" in notes[0]
