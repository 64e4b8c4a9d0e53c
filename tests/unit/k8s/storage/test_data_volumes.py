"""Datasets in every backend's pods: the data step (an init container of the job's image, or for a TrainJob the
step before torch's launcher), the data cache (the claim `data_cache_pvc`, else the pod's emptyDir), each
fetched version at its target (a relative one below the run's working directory) and claims where they were;
valid for the upstream CRD schemas and the native models; the run record keeps the pins, the code manifest and
the base digest, and reads records without them."""

import dataclasses

import pytest

from tests.support import crd_schema
from tests.support.jobs import write_job
from tests.support.native import native_errors
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.datafetch import MODULE
from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.datafetch.data_pins import decode_pins
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.backends import trainjob
from vdk.plugin.ml_training.k8s.manifests import limitations
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs import record as run_record
from vdk.plugin.ml_training.k8s.storage import data_volumes

DATA = """
[ml-training.data]
data/train = s3://vision-datasets/cifar10/train
data/tok = hf://datasets/org/tok@main
/corpus = pvc:corpora/wiki

[ml-training.mounts]
/data = pvc:imagenet
"""
BACKENDS = [("pytorchjob", None), ("job", None)] + [("trainjob", m) for m in trainjob.MECHANISMS]
TRAIN_PIN = DataPin("data/train", "s3://vision-datasets/cifar10/train", None, "f" * 64, False, None, 3, 300)
TOK_PIN = DataPin("data/tok", "hf://datasets/org/tok@main", "c" * 40, "c" * 40, True, None, 2, 20)


def spec_of(tmp_path, **ml):
    return load_job_spec(write_job(tmp_path, "vision", ml={"nodes": "2", **ml}, extra=DATA))


def pinned_run(spec):
    return dataclasses.replace(make_run(spec), data=(TRAIN_PIN, TOK_PIN))


def pod_of(manifest: dict, backend: str) -> dict:
    if backend == "pytorchjob":
        return manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    if backend == "job":
        return manifest["spec"]["template"]["spec"]
    changes = manifest["spec"]
    for mechanism in trainjob.MECHANISMS:
        if mechanism in changes:
            (change,) = changes[mechanism]
            if mechanism == trainjob.POD_SPEC_OVERRIDES:
                return change
            if mechanism == trainjob.POD_TEMPLATE_OVERRIDES:
                return change["spec"]
            (job,) = change["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
            return job["template"]["spec"]["template"]["spec"]
    raise AssertionError("no pod changes")


def schema_errors(manifest: dict, mechanism: str | None) -> list:
    if manifest["kind"] == "PyTorchJob":
        return crd_schema.pytorchjob_schema().errors(manifest)
    if manifest["kind"] == "TrainJob":
        return crd_schema.trainjob_schema(mechanism).errors(manifest)
    return native_errors(manifest, "V1" + manifest["kind"])


def argument(argv: list[str], flag: str) -> list[str]:
    return [argv[i + 1] for i, a in enumerate(argv) if a == flag]


@pytest.mark.parametrize("backend, mechanism", BACKENDS)
def test_every_backend_runs_the_data_step_and_mounts_each_dataset_at_its_target(tmp_path, backend, mechanism):
    spec = spec_of(tmp_path, data_cache_pvc="ml-data-cache")
    run = pinned_run(spec)
    manifests = render_run(spec, IMAGE, run, "ml", backend, trainer_cluster(mechanism) if mechanism else None)
    for manifest in manifests:
        assert schema_errors(manifest, mechanism) == [], manifest["kind"]
    pod = pod_of(manifests[0], backend)
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes[data_volumes.CACHE_VOLUME]["persistentVolumeClaim"] == {"claimName": "ml-data-cache"}
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    corpus = mounts["/corpus"]
    assert volumes[corpus["name"]]["persistentVolumeClaim"] == {"claimName": "corpora", "readOnly": True}
    assert corpus["subPath"] == "wiki" and corpus["readOnly"] is True
    train_at = f"{layout.JOB_DIR}/data/train"  # no output claim: the working directory is the image's job dir
    if backend == "trainjob":
        command = manifests[0]["spec"]["trainer"]["command"]
        assert command[1:4] == ["-m", MODULE, "fetch"] and "--" in command
        assert command[command.index("--") + 1 :][1:3] == ["-m", layout.LAUNCHER_MODULE]
        links = dict(a.split("=", 1) for a in argument(command, "--link"))
        assert links[train_at] == f"{layout.DATA_CACHE_DIR}/vdk-data/{TRAIN_PIN.cache_key}"
        assert mounts[layout.DATA_CACHE_DIR]["name"] == data_volumes.CACHE_VOLUME
        assert train_at not in mounts  # linked by the data step: a TrainJob's container mounts a volume once
        step = command[: command.index("--")]
    else:
        assert "initContainers" in pod and [c["name"] for c in pod["initContainers"]] == ["vdk-data"]
        (init,) = pod["initContainers"]
        assert init["image"] == IMAGE.reference and init["command"][1:4] == ["-m", MODULE, "fetch"]
        # the stores' endpoints and credentials, as the training container has them
        assert all(e in pod["containers"][0]["env"] for e in init["env"]) and init["env"]
        assert "nvidia.com/gpu" not in init["resources"]["requests"]
        assert mounts[train_at] == {
            "name": data_volumes.CACHE_VOLUME,
            "mountPath": train_at,
            "readOnly": True,
            "subPath": f"vdk-data/{TRAIN_PIN.cache_key}",
        }
        init_mounts = {m["mountPath"]: m for m in init["volumeMounts"]}
        assert init_mounts[layout.DATA_CACHE_DIR] == {
            "name": data_volumes.CACHE_VOLUME,
            "mountPath": "/opt/vdk-ml/data-cache",
        }
        assert init_mounts["/data"]["readOnly"] is True and init_mounts["/corpus"]["subPath"] == "wiki"
        step = init["command"]
    assert decode_pins(argument(step, "--pins")[0]) == [TRAIN_PIN, TOK_PIN]  # exactly the pinned versions
    assert argument(step, "--claim") == ["ml-data-cache"]
    assert sorted(argument(step, "--manifest")) == ["/corpus=/corpus", "/data=/data"]


def test_relative_targets_are_below_the_output_directory_when_it_is_the_working_directory(tmp_path):
    spec = spec_of(tmp_path, output_pvc="ml-outputs")
    pod = pod_of(render_run(spec, IMAGE, pinned_run(spec), "ml", "job")[0], "job")
    paths = {m["mountPath"] for m in pod["containers"][0]["volumeMounts"]}
    assert {f"{layout.OUTPUT_DIR}/data/train", f"{layout.OUTPUT_DIR}/data/tok", "/corpus", "/data"} <= paths


def test_without_a_cache_claim_each_pod_fetches_into_its_own_directory(tmp_path):
    spec = spec_of(tmp_path)
    pod = pod_of(render_run(spec, IMAGE, pinned_run(spec), "ml", "pytorchjob")[0], "pytorchjob")
    assert {v["name"]: v for v in pod["volumes"]}[data_volumes.CACHE_VOLUME] == {
        "name": "vdk-data-cache",
        "emptyDir": {},
    }
    assert "--claim" not in pod["initContainers"][0]["command"]
    (note,) = limitations(spec, "pytorchjob")  # the deploy says what that costs
    assert "no data_cache_pvc: each of the run's 2 pods fetches its datasets itself" in note
    assert limitations(spec_of(tmp_path / "cached", data_cache_pvc="ml-data-cache"), "pytorchjob") == []


def test_a_job_with_claims_only_reports_their_manifests_and_fetches_nothing(tmp_path):
    spec = load_job_spec(write_job(tmp_path, "claims", extra="[ml-training.mounts]\n/data = pvc:imagenet\n"))
    pod = pod_of(render_run(spec, IMAGE, make_run(spec), "ml", "job")[0], "job")
    (init,) = pod["initContainers"]
    assert argument(init["command"], "--pins") == ["[]"] and argument(init["command"], "--manifest") == ["/data=/data"]
    assert data_volumes.CACHE_VOLUME not in {v["name"] for v in pod["volumes"]}


def test_a_job_without_datasets_has_no_data_step(tmp_path):
    spec = load_job_spec(write_job(tmp_path, "plain"))
    for backend in ("pytorchjob", "job"):
        assert "initContainers" not in pod_of(render_run(spec, IMAGE, make_run(spec), "ml", backend)[0], backend)
    trainer = render_run(spec, IMAGE, make_run(spec), "ml", "trainjob")[0]["spec"]["trainer"]
    assert MODULE not in trainer["command"]


def test_a_dry_run_renders_the_datasets_unresolved(tmp_path):
    spec = spec_of(tmp_path)
    pod = pod_of(render_run(spec, IMAGE, make_run(spec), "ml", "job")[0], "job")
    pins = decode_pins(argument(pod["initContainers"][0]["command"], "--pins")[0])
    assert [p.resolved for p in pins] == [False, False]  # the data step refuses them: see datafetch's tests
    assert all(p.cache_key.startswith("unresolved-") for p in pins)


def test_the_record_keeps_the_pins_the_code_manifest_and_the_base_and_reads_older_records(tmp_path):
    spec = spec_of(tmp_path)
    claim = DataPin("/corpus", "pvc:corpora/wiki")
    run = dataclasses.replace(
        pinned_run(spec),
        data=(TRAIN_PIN, TOK_PIN, claim),
        code_files=(("train.py", "a" * 64), ("lib/util.py", "b" * 64)),
        base_digest="pytorch/pytorch@sha256:" + "e" * 64,
    )
    configmap = render_run(spec, IMAGE, run, "ml", "job")[-1]
    record = run_record.parse(configmap)
    assert record.data == (TRAIN_PIN, TOK_PIN, claim)
    assert record.code == {"train.py": "a" * 64, "lib/util.py": "b" * 64}
    assert record.base == "pytorch/pytorch@sha256:" + "e" * 64
    for key in (run_record.KEY_DATA, run_record.KEY_CODE, run_record.KEY_BASE):
        del configmap["data"][key]  # a record written before these existed
    older = run_record.parse(configmap)
    assert (older.data, older.code, older.base) == ((), None, None)
    reported = {"files": 2, "bytes": 9, "sha256": "d" * 64, "partial": False}
    fresh = render_run(spec, IMAGE, run, "ml", "job")[-1]
    record = run_record.parse(run_record.with_manifests(fresh, {"/corpus": reported}))
    assert record.data == (TRAIN_PIN, TOK_PIN, claim.with_manifest(reported))  # what the pods reported, kept
    again = run_record.rerun_manifests(record, "vision-newrun00", "bob@example.com", "2026-02-03T04:05:06Z")
    assert run_record.parse(again[-1]).data == (TRAIN_PIN, TOK_PIN, claim)  # the same versions fetched; the
    # claim's content is the new run's pods' to report, not the original's
