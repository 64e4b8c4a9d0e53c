"""`vdk deploy` of a job with datasets by reference, end to end: the real vdk CLI, a real registry, the fake API
server (which keeps Secrets and claims), and a real S3 API (moto in server mode).

The worked example of docs/data.md: the first deploy pins the dataset and records it; `vdk deploy --if-changed`
starts nothing while nothing changed (exit 0, and says so); a file changed in the bucket makes it start a run
and the diff names the dataset and the file; `vdk diff` shows the same between the two runs with their
outcomes, as text and JSON. Bad input stops the deploy before anything is built or created."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from tests.support.s3_store import ACCESS_KEY
from tests.support.s3_store import SECRET_KEY
from vdk.plugin.ml_training import plugin

pytestmark = pytest.mark.usefixtures("isolated_environment")
TRAIN = """\
import os

import torch

if __name__ == "__main__":
    print(sorted(os.listdir("data/train")))
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.ones(4, 2)).pow(2).mean()
    loss.backward()
    opt.step()
"""
SUCCEEDED = {"conditions": [{"type": "Succeeded", "status": "True", "lastTransitionTime": "2026-01-02T04:00:00Z"}]}


@pytest.fixture(scope="module")
def module_cache(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("vdk-cache")


@pytest.fixture(autouse=True)
def one_cache_per_module(isolated_environment, module_cache, monkeypatch):
    """The tests' deploys share their cache (the dependency layer with the data tools is built once here)."""
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(module_cache))


def vdk(*args: str):
    return CliEntryBasedTestRunner(plugin).invoke(list(args))


def data_job(root: Path, base_image: str, s3_store, bucket: str, ml: str = "") -> Path:
    return write_job(
        root,
        "vision",
        team="ml-platform",
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\ngpus_per_node = 0\n"
        f"data_cache_pvc = ml-data-cache\n{ml}",
        env={"AWS_ENDPOINT_URL": s3_store.url},
        extra=f"[ml-training.data]\ndata/train = s3://{bucket}/train\n"
        "[ml-training.secrets]\nAWS_ACCESS_KEY_ID = s3-credentials/access-key\n"
        "AWS_SECRET_ACCESS_KEY = s3-credentials/secret-key\n",
        files={"train.py": TRAIN},
    )


@pytest.fixture
def data_cluster(cluster, registry, monkeypatch):
    fake = cluster(pytorchjob=True)[0]
    fake.add_secret("s3-credentials", {"access-key": ACCESS_KEY, "secret-key": SECRET_KEY})
    fake.add_claim("ml-data-cache", size="1Gi")
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY)  # the shell's, for the local smoke run's sample
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_KEY)
    return fake


def test_a_changed_file_in_the_bucket_makes_if_changed_start_a_run_and_the_diff_names_it(
    tmp_path, base_image, s3_store, data_cluster
):
    fake = data_cluster
    s3_store.create_bucket("vision-data", versioned=True)
    for name in ("a.jpg", "b.jpg", "c.jpg"):
        s3_store.put("vision-data", f"train/{name}", f"first {name}".encode())
    job = data_job(tmp_path, base_image, s3_store, "vision-data")

    first = vdk("deploy", "-p", str(job), "-o", "json")  # with the smoke run: it reads a sample of the bucket
    assert first.exit_code == 0, first.output
    assert "smoke run PASSED" in first.stderr and "data data/train: a sample of s3://vision-data/train" in first.stderr
    assert "Changes: the first run of this job here" in first.stderr
    run_1 = json.loads(first.stdout)
    (pin,) = run_1["data"]
    assert pin["versioned"] and pin["files"] == 3 and pin["source"] == "s3://vision-data/train"
    (record,) = fake.stored("configmaps")
    assert json.loads(record["data"]["data.json"])[0]["fingerprint"] == pin["fingerprint"]
    assert set(json.loads(record["data"]["code.json"])) == {"train.py", "config.ini"}
    assert record["data"]["base"].startswith(base_image.split(":")[0]) and "@sha256:" in record["data"]["base"]
    fake.set_status("pytorchjobs", run_1["run"], SUCCEEDED)

    unchanged = vdk("deploy", "-p", str(job), "--if-changed", "--skip-smoke")
    assert unchanged.exit_code == 0, unchanged.output
    assert (
        f"Nothing changed since run {run_1['run']}" in unchanged.stdout
        and "Nothing was built or started" in unchanged.stdout
    )
    assert len(fake.stored("pytorchjobs")) == 1  # nothing started

    time.sleep(1.1)  # the store's clock: the new version is after the first pin
    s3_store.put("vision-data", "train/b.jpg", b"second b")
    changed = vdk("deploy", "-p", str(job), "--if-changed", "--skip-smoke", "-o", "json")
    assert changed.exit_code == 0, changed.output
    assert f"--if-changed: data changed since run {run_1['run']}: deploying" in changed.stderr
    assert f"Changes since run {run_1['run']} (Succeeded" in changed.stderr
    assert "data/train (s3://vision-data/train): object versions as of" in changed.stderr
    assert "files 1 changed: b.jpg" in changed.stderr  # the diff names the file
    run_2 = json.loads(changed.stdout)
    assert run_2["started"] and run_2["changes"]["since_last"]["changed_parts"] == ["data"]
    assert len(fake.stored("pytorchjobs")) == 2

    as_json = vdk("diff", "-n", "vision", "-t", "ml-platform", run_1["run"], run_2["run"], "-o", "json")
    assert as_json.exit_code == 0, as_json.output
    compared = json.loads(as_json.stdout)
    assert [r["run"] for r in compared["runs"]] == [run_1["run"], run_2["run"]]
    assert [r["phase"] for r in compared["runs"]] == ["Succeeded", "Pending"]
    diff = compared["diff"]
    assert diff["changed_parts"] == ["data"] and diff["code"] == {"added": [], "changed": [], "removed": []}
    (data,) = diff["data"]
    assert data["same"] is False and data["files_changed"] == ["b.jpg"] and data["files_added"] == []
    assert diff["requirements"] == {"added": {}, "removed": {}, "changed": {}} and diff["config"] == {}

    as_text = vdk("diff", "-n", "vision", "-t", "ml-platform", run_1["run"], run_2["run"])
    assert as_text.exit_code == 0, as_text.output
    assert "outcome" in as_text.stdout and "Succeeded" in as_text.stdout and "GPU-hours" in as_text.stdout
    assert "files 1 changed: b.jpg" in as_text.stdout

    # vdk show says which data version each run trained on, not only vdk diff
    shown = vdk("show", "-n", "vision", "-t", "ml-platform", "-i", run_1["run"], "-o", "json")
    assert shown.exit_code == 0, shown.output
    (trained_on,) = json.loads(shown.stdout)["latest"]["data"]
    assert trained_on["fingerprint"] == pin["fingerprint"] and trained_on["as_of"] == pin["as_of"]
    assert trained_on["objects"] is None  # the list of files is vdk diff's
    text = vdk("show", "-n", "vision", "-t", "ml-platform")
    assert text.exit_code == 0, text.output
    (second,) = run_2["data"]
    assert (
        f"  data       data/train: s3://vision-data/train at object versions as of {second['as_of']} (3 objects, "
        in (text.stdout)
    )


def test_code_and_config_changes_are_named_and_an_unknown_run_says_which_exist(
    tmp_path, base_image, s3_store, data_cluster
):
    fake = data_cluster
    s3_store.create_bucket("code-data")
    s3_store.put("code-data", "train/x.bin", b"x")
    job = data_job(tmp_path, base_image, s3_store, "code-data")
    first = vdk("deploy", "-p", str(job), "--skip-smoke", "-o", "json")
    assert first.exit_code == 0, first.output
    (job / "train.py").write_text(TRAIN + "# tuned\n")
    (job / "augment.py").write_text("X = 1\n")
    (job / "config.ini").write_text(
        (job / "config.ini").read_text().replace("gpus_per_node = 0", "gpus_per_node = 0\nmax_restarts = 5")
    )
    second = vdk("deploy", "-p", str(job), "--skip-smoke")
    assert second.exit_code == 0, second.output
    assert "code          1 added: augment.py; 2 changed: config.ini, train.py" in second.stderr
    assert "max_restarts: 3 -> 5" in second.stderr
    assert "data/train (s3://code-data/train): unchanged" in second.stderr
    run_1 = json.loads(first.stdout)["run"]
    missing = vdk("diff", "-n", "vision", "-t", "ml-platform", run_1, "nosuchrun")
    assert missing.exit_code != 0 and "has no run vision-nosuchrun" in missing.stderr
    assert "its runs are: " in missing.stderr and run_1 in missing.stderr
    assert len(fake.stored("pytorchjobs")) == 2


@pytest.mark.parametrize(
    "change, problem, fix",
    [
        ("small-claim", "more than the data cache claim ml-data-cache holds", "use a bigger claim for data_cache_pvc"),
        ("no-secret", "Secret s3-credentials is not in namespace ml", "kubectl create secret generic s3-credentials"),
        ("no-bucket", "bucket missing-bucket does not exist", "correct the bucket"),
    ],
)
def test_bad_data_stops_the_deploy_before_anything_is_built_or_created(
    tmp_path, base_image, s3_store, cluster, registry, monkeypatch, change, problem, fix
):
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    if change != "no-secret":
        fake.add_secret("s3-credentials", {"access-key": ACCESS_KEY, "secret-key": SECRET_KEY})
    fake.add_claim("ml-data-cache", size="10" if change == "small-claim" else "1Gi")
    s3_store.create_bucket("bad-input-data")
    s3_store.put("bad-input-data", "train/x.bin", b"0123456789abcdef")
    job = data_job(tmp_path, base_image, s3_store, "missing-bucket" if change == "no-bucket" else "bad-input-data")
    result = vdk("deploy", "-p", str(job), "--skip-smoke")
    assert result.exit_code != 0
    assert problem in result.stderr and fix in result.stderr, result.stderr
    assert "Nothing was built or deployed." in result.stderr
    if change != "no-secret":
        assert "config.ini:" in result.stderr and "[ml-training.data] data/train" in result.stderr  # its line
    assert fake.run_objects() == []
