"""A run that continues another (`vdk execute --start --from RUN`): its manifests, on every backend and Trainer
pod-change mechanism, mount RUN's directory of the output claim read-only beside its own and tell the training
container where it is and whose it is; what a cluster enforces still takes them (the upstream CRDs, the API
server's rules for a Job)."""

import pytest

from tests.support import crd_schema
from tests.support.native import native_errors
from tests.support.rendered_runs import mappings
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training.k8s.backends import trainjob
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs import continuation as run_continuation
from vdk.plugin.ml_training.k8s.runs import record as run_record

NEW = "mnist-ddp-zz000001"


def continued(tmp_path, backend, mechanism=None, **keys):
    spec = make_spec(tmp_path, nodes="2", gpus_per_node="1", output_pvc="runs", **keys)
    run = make_run(spec)
    cluster = trainer_cluster(mechanism) if mechanism else None
    *_, record = render_run(spec, IMAGE, run, "ml", backend, cluster)
    again = run_record.rerun_manifests(run_record.parse(record), NEW, "bob@example.com", "2026-02-01T00:00:00Z")
    return run, run_continuation.continuing(again, NEW, run.name)


def containers(manifest):
    """Every container-like dict of a manifest with its env or its mounts (wherever the backend keeps them)."""
    return [node for node in mappings(manifest) if "env" in node or "volumeMounts" in node]


@pytest.mark.parametrize(
    "backend, mechanism",
    [("pytorchjob", None), ("job", None), *[("trainjob", m) for m in trainjob.MECHANISMS]],
)
def test_every_backend_s_training_container_gets_the_run_it_continues_and_its_outputs(tmp_path, backend, mechanism):
    run, manifests = continued(tmp_path, backend, mechanism)
    main, record = manifests[0], manifests[-1]
    assert main["metadata"]["annotations"]["vdk.io/continues"] == run.name
    assert record["metadata"]["annotations"]["vdk.io/continues"] == run.name
    envs = [{e["name"]: e.get("value") for e in c["env"]} for c in containers(main) if "env" in c]
    told = [e for e in envs if "VDK_ML_TRAINING_RUN_NAME" in e]
    assert told and all(e["VDK_ML_TRAINING_RESUME_FROM"] == run.name for e in told)
    assert all(e["VDK_ML_TRAINING_CONTINUES_DIR"] == run_continuation.RUN_MOUNT for e in told)
    mounts = [m for c in containers(main) for m in c.get("volumeMounts") or [] if m["name"].startswith("vdk-")]
    assert {(m["name"], m["subPath"], m["mountPath"], m.get("readOnly", False)) for m in mounts} >= {
        ("vdk-outputs", NEW, "/opt/vdk-ml/outputs", False),
        ("vdk-continues", run.name, run_continuation.RUN_MOUNT, True),
    }
    volumes = [v for node in mappings(main) for v in node.get("volumes") or []]
    claims = {v["name"]: v["persistentVolumeClaim"] for v in volumes if "persistentVolumeClaim" in v}
    assert claims["vdk-continues"] == {"claimName": "runs", "readOnly": True}
    assert claims["vdk-outputs"]["claimName"] == "runs"
    if backend == "pytorchjob":
        assert crd_schema.pytorchjob_schema().errors(main) == []
    elif backend == "trainjob":
        assert crd_schema.trainjob_schema(mechanism).errors(main) == []
    else:
        assert native_errors(main, "V1Job") == []


def test_a_run_without_an_output_claim_gets_no_mount_and_manifests_are_not_changed_in_place(tmp_path):
    spec = make_spec(tmp_path, nodes="1", gpus_per_node="1")
    run = make_run(spec)
    *_, record = render_run(spec, IMAGE, run, "ml", "job")
    again = run_record.rerun_manifests(run_record.parse(record), NEW, "bob@example.com", "2026-02-01T00:00:00Z")
    before = repr(again)
    changed = run_continuation.continuing(again, NEW, run.name)
    assert repr(again) == before
    assert not [m for c in containers(changed[0]) for m in c.get("volumeMounts") or [] if m["name"] == "vdk-continues"]
