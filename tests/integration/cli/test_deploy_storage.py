"""`vdk deploy` of a job with an output claim, datasets and secrets: a missing claim stops it before the smoke
check and the build; a deploy gives the cluster the claims' mounts and the Secret references, never a value."""

from __future__ import annotations

import json

import pytest
import requests
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin

pytestmark = pytest.mark.usefixtures("isolated_environment")

STORAGE = "[ml-training.mounts]\n/data = pvc:imagenet\n[ml-training.secrets]\nHF_TOKEN = hf-credentials/token\n"
TRAIN = 'if __name__ == "__main__":\n    print("trained")\n'


def job_of(root, base_image: str, name: str):
    ml = f"base_image = {base_image}\nbase_python_version = 3.11\nnodes = 2\ngpus_per_node = 0\n"
    ml += "output_pvc = ml-outputs\n"
    return write_job(root, name, team="ml-platform", ml=ml, extra=STORAGE, files={"train.py": TRAIN})


def vdk(*args: str):
    return CliEntryBasedTestRunner(plugin).invoke(list(args))


def test_a_missing_claim_stops_the_deploy_before_anything_is_built(
    tmp_path, registry, base_image, cluster, monkeypatch
):
    fake = cluster(pytorchjob=True)[0]
    fake.add_claim("ml-outputs")
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    result = vdk("deploy", "-p", str(job_of(tmp_path, base_image, "no-claim-job")))
    assert result.exit_code == 1
    assert "no PersistentVolumeClaim imagenet ([ml-training.mounts] /data) in namespace ml" in result.stderr
    assert "Nothing was built or deployed" in result.stderr
    # the cluster check runs beside the smoke run and stops it (ops/deploy_checks.py)
    assert "smoke run PASSED" not in result.stderr and "Code:" not in result.stderr
    answer = requests.get(f"{registry.url}/v2/team/no-claim-job/tags/list", timeout=5, verify=False)
    assert answer.status_code in (401, 404) or not answer.json().get("tags")  # nothing pushed
    assert fake.run_objects() == []


def test_a_deploy_gives_the_pods_the_claims_and_the_secret_references(
    tmp_path, registry, base_image, cluster, monkeypatch
):
    fake = cluster(pytorchjob=True)[0]
    fake.add_claim("ml-outputs")
    fake.add_claim("imagenet", ("ReadOnlyMany",))
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    monkeypatch.setenv("HF_TOKEN", "hf_" + "Q" * 34)  # the deployer's own token stays on the laptop
    result = vdk("deploy", "-p", str(job_of(tmp_path, base_image, "claims-job")), "--skip-smoke", "-o", "json")
    assert result.exit_code == 0, result.output
    run = json.loads(result.stdout)["run"]
    (stored,) = fake.stored("pytorchjobs")
    pod = stored["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["spec"]
    mounts = {m["mountPath"]: m for m in pod["containers"][0]["volumeMounts"]}
    assert mounts["/opt/vdk-ml/outputs"]["subPath"] == run and mounts["/data"]["readOnly"] is True
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    assert env["HF_TOKEN"] == {
        "name": "HF_TOKEN",
        "valueFrom": {"secretKeyRef": {"name": "hf-credentials", "key": "token"}},
    }
    everything = json.dumps([fake.stored("pytorchjobs"), fake.stored("configmaps")])
    assert "hf_QQQQ" not in everything
