"""Outputs, datasets and secrets in every backend's manifests: the run's directory of the output claim mounted
where the bootstrap makes it the working directory, datasets read-only at their paths, secrets as
`secretKeyRef`s; valid for the upstream CRD schemas and the native models; the run record keeps references."""

import json

import pytest

from tests.support import crd_schema
from tests.support.jobs import write_job
from tests.support.native import native_errors
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.backends import trainjob
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs import record as run_record

STORAGE = """
[ml-training.mounts]
/data = pvc:imagenet
/text = pvc:shared-datasets/text/v2

[ml-training.secrets]
HF_TOKEN = hf-credentials/token
WANDB_API_KEY = wandb/api-key
"""
BACKENDS = [("pytorchjob", None), ("job", None)] + [("trainjob", m) for m in trainjob.MECHANISMS]


@pytest.fixture
def spec(tmp_path):
    job = write_job(
        tmp_path, "vision", ml={"nodes": "2", "output_pvc": "ml-outputs"}, env={"HF_HOME": "/data/hf"}, extra=STORAGE
    )
    return load_job_spec(job)


def training_pod(manifest: dict, backend: str) -> tuple[dict, list[dict], list[dict]]:
    """(container env holder, pod volumes, container mounts) of the run's training pods."""
    if backend == "pytorchjob":
        spec = manifest["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
        return spec["containers"][0], spec["volumes"], spec["containers"][0]["volumeMounts"]
    if backend == "job":
        spec = manifest["spec"]["template"]["spec"]
        return spec["containers"][0], spec["volumes"], spec["containers"][0]["volumeMounts"]
    changes = manifest["spec"]
    for mechanism in trainjob.MECHANISMS:
        if mechanism in changes:
            (change,) = changes[mechanism]
            if mechanism == trainjob.POD_SPEC_OVERRIDES:
                pod = change
            elif mechanism == trainjob.POD_TEMPLATE_OVERRIDES:
                pod = change["spec"]
            else:
                (job,) = change["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
                pod = job["template"]["spec"]["template"]["spec"]
            return changes["trainer"], pod["volumes"], pod["containers"][0]["volumeMounts"]
    raise AssertionError("no pod changes")


def errors(manifest: dict, mechanism: str | None) -> list:
    if manifest["kind"] == "PyTorchJob":
        return crd_schema.pytorchjob_schema().errors(manifest)
    if manifest["kind"] == "TrainJob":
        return crd_schema.trainjob_schema(mechanism).errors(manifest)
    return native_errors(manifest, "V1" + manifest["kind"])


@pytest.mark.parametrize("backend, mechanism", BACKENDS)
def test_every_backend_mounts_the_run_s_outputs_datasets_and_secrets(spec, backend, mechanism):
    run = make_run(spec)
    cluster = trainer_cluster(mechanism) if mechanism else None
    manifests = render_run(spec, IMAGE, run, "ml", backend, cluster)
    for manifest in manifests:
        assert errors(manifest, mechanism) == [], manifest["kind"]
    container, volumes, mounts = training_pod(manifests[0], backend)
    by_name = {v["name"]: v for v in volumes}
    outputs = next(m for m in mounts if m["mountPath"] == layout.OUTPUT_DIR)
    assert outputs["subPath"] == run.name and not outputs.get("readOnly")  # one directory per run, writable
    assert by_name[outputs["name"]]["persistentVolumeClaim"] == {"claimName": "ml-outputs"}
    data = {m["mountPath"]: m for m in mounts if m["mountPath"] in ("/data", "/text")}
    assert set(data) == {"/data", "/text"}
    assert all(m["readOnly"] is True for m in data.values())
    assert data["/text"]["subPath"] == "text/v2" and "subPath" not in data["/data"]
    claims = {m: by_name[data[m]["name"]]["persistentVolumeClaim"] for m in data}
    assert claims == {
        "/data": {"claimName": "imagenet", "readOnly": True},
        "/text": {"claimName": "shared-datasets", "readOnly": True},
    }
    env = {e["name"]: e for e in container["env"]}
    assert env["VDK_ML_TRAINING_OUTPUT_DIR"] == {"name": "VDK_ML_TRAINING_OUTPUT_DIR", "value": layout.OUTPUT_DIR}
    assert env["HF_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "hf-credentials", "key": "token"}}
    assert env["WANDB_API_KEY"]["valueFrom"] == {"secretKeyRef": {"name": "wandb", "key": "api-key"}}
    assert "value" not in env["HF_TOKEN"]


def test_without_an_output_claim_the_pods_work_in_the_image_as_before(tmp_path):
    spec = load_job_spec(write_job(tmp_path, "plain", ml={"nodes": "2"}))
    manifest = render_run(spec, IMAGE, make_run(spec), "ml", "job")[0]
    container, volumes, mounts = training_pod(manifest, "job")
    assert [v["name"] for v in volumes] == ["dshm"] and [m["mountPath"] for m in mounts] == ["/dev/shm"]
    assert "VDK_ML_TRAINING_OUTPUT_DIR" not in {e["name"] for e in container["env"]}


def test_the_run_record_keeps_secret_references_and_a_rerun_gets_its_own_output_directory(spec, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_" + "x" * 34)  # in the deployer's shell: never in what is rendered
    run = make_run(spec)
    manifests = render_run(spec, IMAGE, run, "ml", "pytorchjob")
    configmap = manifests[-1]
    assert "hf_xxxx" not in json.dumps(manifests)
    kept = run_record.parse(configmap)
    assert kept.spec["secrets"] == [
        {"name": "HF_TOKEN", "secret": "hf-credentials", "key": "token"},
        {"name": "WANDB_API_KEY", "secret": "wandb", "key": "api-key"},
    ]
    assert kept.spec["output_pvc"] == "ml-outputs"
    again = run_record.rerun_manifests(kept, "vision-newrun00", "bob@example.com", "2026-02-03T04:05:06Z")
    _, _, mounts = training_pod(again[0], "pytorchjob")
    assert next(m for m in mounts if m["mountPath"] == layout.OUTPUT_DIR)["subPath"] == "vision-newrun00"
