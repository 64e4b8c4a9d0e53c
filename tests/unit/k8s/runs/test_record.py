"""The run record is written in one place: a re-run's record is the original's, renamed, with the
same labels, spec hash and size limit as a deploy's."""

import dataclasses

import pytest

from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs import record as run_record


@pytest.mark.parametrize("backend", ["pytorchjob", "trainjob", "job"])
def test_a_rerun_record_is_the_original_renamed(tmp_path, backend):
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="1", queue="team-a-queue")
    run = make_run(spec)
    *objects, original = render_run(spec, IMAGE, run, "ml", backend)
    again = run_record.rerun_manifests(
        run_record.parse(original), "mnist-ddp-zz000001", "bob@example.com", "2026-02-01T00:00:00Z"
    )
    copy = again[-1]
    assert copy["metadata"]["name"] == "mnist-ddp-zz000001-record"
    assert copy["metadata"]["namespace"] == original["metadata"]["namespace"] == "ml"
    renamed = {k: v.replace(run.name, "mnist-ddp-zz000001") for k, v in original["metadata"]["labels"].items()}
    assert copy["metadata"]["labels"] == renamed
    assert copy["metadata"]["annotations"] == {
        "vdk.io/spec-sha256": run.spec_hash,
        "vdk.io/rerun-of": run.name,
    }
    assert original["metadata"]["annotations"] == {"vdk.io/spec-sha256": run.spec_hash}
    parsed = run_record.parse(copy)
    assert parsed == dataclasses.replace(
        run_record.parse(original), run_name="mnist-ddp-zz000001", manifests=again[:-1]
    )


def test_a_record_too_large_for_a_configmap_is_refused_on_deploy_and_on_rerun(tmp_path):
    spec = make_spec(tmp_path, env={"BIG": "x" * 500_000})
    with pytest.raises(MLTrainingError, match="more than a ConfigMap holds"):
        render_run(spec, IMAGE, make_run(spec), "ml", "job")  # the env is in the spec and twice in the manifests
    small = make_spec(tmp_path / "small")
    rec = run_record.parse(render_run(small, IMAGE, make_run(small), "ml", "job")[-1])
    grown = dataclasses.replace(rec, spec={**rec.spec, "notes": "x" * 1_000_000})
    with pytest.raises(MLTrainingError, match="more than a ConfigMap holds"):
        run_record.rerun_manifests(grown, "mnist-ddp-zz000001", "bob@example.com", "2026-02-01T00:00:00Z")
