"""Local runs of a job with datasets by reference: a smoke run never fetches a whole dataset — the local files
of `smoke_data`, else a sample capped by `smoke_sample_files` and `smoke_sample_size` (said in the run's
summary, refreshed when the store changed) — and `vdk run --full` fetches it whole, once per version, with
progress; the real `vdk run` reads ./data/train as a pod does. S3 is moto in server mode."""

from __future__ import annotations

import pytest

from tests.support.jobs import write_job
from tests.support.s3_store import ACCESS_KEY
from tests.support.s3_store import SECRET_KEY
from tests.support.vdk_cli import smoke_run
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.image.build_progress import Transfer
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.ops.data_samples import local_datasets
from vdk.plugin.ml_training.runtime import protocol

pytestmark = pytest.mark.usefixtures("isolated_environment")
SHELL = {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY}
READS_THE_DATA = """\
import os

import torch

if __name__ == "__main__":
    files = sorted(os.listdir("data/train"))
    print("the code sees", len(files), "files:", ",".join(files), flush=True)
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        loss = model(torch.ones(4, 2)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
"""


def bucket_of(s3_store, bucket: str, count: int = 30, size: int = 4) -> None:
    s3_store.create_bucket(bucket)
    for n in range(count):
        s3_store.put(bucket, f"train/{n:03d}.bin", bytes([n]) * size)


def job_of(tmp_path, s3_store, bucket: str, ml: dict | None = None, files: dict | None = None):
    extra = (
        f"[ml-training.data]\ndata/train = s3://{bucket}/train\n/data = pvc:imagenet\n"
        "[ml-training.secrets]\nAWS_ACCESS_KEY_ID = s3/key-id\nAWS_SECRET_ACCESS_KEY = s3/secret\n"
    )
    env = {"AWS_ENDPOINT_URL": s3_store.url}
    return write_job(tmp_path, "sampled", ml=ml or {}, env=env, extra=extra, files=files)


def test_a_smoke_run_takes_the_first_files_up_to_the_caps_and_says_so(tmp_path, s3_store):
    bucket_of(s3_store, "sampled-files")
    spec = load_job_spec(job_of(tmp_path, s3_store, "sampled-files", ml={"smoke_sample_files": "5"}))
    (dataset,), notes = local_datasets(spec, protocol.SMOKE, shell=SHELL)
    assert sorted(p.name for p in dataset.path.iterdir()) == [f"{n:03d}.bin" for n in range(5)]
    assert "a sample of s3://sampled-files/train: 5 files, 20 B (its first files only" in dataset.what
    assert "smoke_sample_files = 5" in dataset.what
    assert any("/data (pvc:imagenet) is an absolute path" in n for n in notes)

    by_size = load_job_spec(job_of(tmp_path / "b", s3_store, "sampled-files", ml={"smoke_sample_size": "10"}))
    (capped,), _ = local_datasets(by_size, protocol.SMOKE, shell=SHELL)
    assert sorted(p.name for p in capped.path.iterdir()) == ["000.bin", "001.bin"]  # 4 + 4 <= 10 bytes

    s3_store.put("sampled-files", "train/001.bin", b"ZZZZ")  # the same size, other content
    (again,), _ = local_datasets(spec, protocol.SMOKE, shell=SHELL)
    assert (again.path / "001.bin").read_bytes() == b"ZZZZ"  # the sample follows the store


def test_smoke_data_stands_for_the_dataset_and_a_missing_path_says_what_to_do(tmp_path, s3_store):
    job = job_of(tmp_path, s3_store, "no-bucket-needed", ml={"smoke_data": "data/train=samples/train"})
    (job / "samples" / "train").mkdir(parents=True)
    (dataset,), _ = local_datasets(load_job_spec(job), protocol.SMOKE, shell=SHELL)
    assert dataset.path == job / "samples" / "train" and dataset.what == "smoke_data samples/train"
    (job / "samples" / "train").rmdir()
    with pytest.raises(JobConfigError) as info:
        local_datasets(load_job_spec(job), protocol.SMOKE, shell=SHELL)
    assert info.value.key == "smoke_data" and "does not exist" in info.value.problem


class Recorded(Progress):
    def __init__(self):
        self.stages, self.transfers = [], []

    def stage(self, message: str) -> None:
        self.stages.append(message)

    def transfer(self, label, total, action=("uploading", "uploaded")) -> Transfer:
        progress = self

        class Counted(Transfer):
            def advance(self, nbytes: int) -> None:
                progress.transfers.append((label, total, nbytes))

        return Counted()


def test_a_full_run_fetches_each_dataset_whole_once_per_version_with_progress(tmp_path, s3_store):
    bucket_of(s3_store, "whole-data", count=12, size=1000)
    spec = load_job_spec(job_of(tmp_path, s3_store, "whole-data", ml={"smoke_sample_files": "2"}))
    progress = Recorded()
    (dataset,), _ = local_datasets(spec, protocol.FULL, progress, shell=SHELL)
    assert len(list(dataset.path.iterdir())) == 12 and "whole, at object list" in dataset.what
    assert progress.transfers and progress.transfers[0][:2] == ("data/train (12 files)", 12_000)
    assert sum(n for _, _, n in progress.transfers) == 12_000
    again = Recorded()
    (same,), _ = local_datasets(spec, protocol.FULL, again, shell=SHELL)
    assert same.path == dataset.path and again.transfers == []  # the same version: not fetched again


@pytest.mark.slow
def test_vdk_run_gives_the_code_its_sample_at_the_relative_path_and_says_so(tmp_path, s3_store):
    bucket_of(s3_store, "vdk-run-data", count=9)
    job = job_of(tmp_path, s3_store, "vdk-run-data", ml={"smoke_sample_files": "3"}, files={"train.py": READS_THE_DATA})
    done = smoke_run(job, env=SHELL)
    output = done.stdout
    assert done.returncode == 0, output
    assert "the code sees 3 files: 000.bin,001.bin,002.bin" in output
    assert "data data/train: a sample of s3://vdk-run-data/train: 3 files" in output  # at the start and the end
    assert "smoke run PASSED" in output
