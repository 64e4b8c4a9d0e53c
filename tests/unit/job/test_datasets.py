"""[ml-training.data]: datasets by reference at the path the code reads, and smoke_data. What a user writes, what
the spec holds, and for every mistake one error that names the file, its line, the key and the fix."""

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import DataMount
from vdk.plugin.ml_training.job import DataSource
from vdk.plugin.ml_training.job import load_job_spec


def spec_of(tmp_path, data: str, ml=None, mounts: str = ""):
    extra = f"[ml-training.data]\n{data}\n" + (f"[ml-training.mounts]\n{mounts}\n" if mounts else "")
    return load_job_spec(write_job(tmp_path, "job", ml=ml or {}, extra=extra))


def error_of(tmp_path, data: str, **kwargs) -> JobConfigError:
    with pytest.raises(JobConfigError) as info:
        spec_of(tmp_path, data, **kwargs)
    return info.value


def test_each_scheme_is_read_with_its_target(tmp_path):
    spec = spec_of(
        tmp_path,
        "data/train = s3://vision-datasets/cifar10/train/\n"
        "data/tok = hf://datasets/org/name@main\n"
        "models/base = hf://org/llama@v1.2\n"
        "/data = pvc:imagenet\n"
        "./data/test = s3://vision-datasets\n",
    )
    assert spec.data == (
        DataSource("data/train", "s3://vision-datasets/cifar10/train"),
        DataSource("data/tok", "hf://datasets/org/name@main"),
        DataSource("models/base", "hf://org/llama@v1.2"),
        DataSource("/data", "pvc:imagenet"),
        DataSource("data/test", "s3://vision-datasets"),
    )
    assert [d.scheme for d in spec.data] == ["s3", "hf", "hf", "pvc", "s3"]
    assert [d.relative for d in spec.data] == [True, True, True, False, True]
    assert spec.data[3].claim() == ("imagenet", "")
    assert spec.to_dict()["data"][0] == {"target": "data/train", "source": "s3://vision-datasets/cifar10/train"}


def test_the_data_references_are_part_of_what_a_job_trains_and_the_cache_claim_is_not(tmp_path):
    one = spec_of(tmp_path / "a", "data/train = s3://bucket/v1")
    other = spec_of(tmp_path / "b", "data/train = s3://bucket/v2")
    cached = spec_of(tmp_path / "c", "data/train = s3://bucket/v1", ml={"data_cache_pvc": "ml-data-cache"})
    assert one.fingerprint() != other.fingerprint()
    assert one.fingerprint() == cached.fingerprint() and cached.data_cache_pvc == "ml-data-cache"


def test_smoke_data_and_the_sample_caps_are_read(tmp_path):
    spec = spec_of(
        tmp_path,
        "data/train = s3://bucket/train\ndata/tok = hf://datasets/org/tok",
        ml={"smoke_data": "data/train=samples/train, ./data/tok = /srv/tok", "smoke_sample_files": "5",
            "smoke_sample_size": "1Mi"},
    )  # fmt: skip
    assert spec.smoke_data == (("data/train", "samples/train"), ("data/tok", "/srv/tok"))
    assert (spec.smoke_sample_files, spec.smoke_sample_size) == (5, "1Mi")
    default = spec_of(tmp_path / "d", "data/train = s3://bucket/train")
    assert (default.smoke_data, default.smoke_sample_files, default.smoke_sample_size) == ((), 20, "64Mi")


@pytest.mark.parametrize(
    "line, problem, fix",
    [
        ("data = gs://bucket/x", "'gs://' is not a source the cluster can fetch (s3://, hf://, pvc:)", "a source is"),
        ("data = S3://bucket/x", "'S3://' is not a source", "in lower case: `data = s3://bucket/x`"),
        ("data = imagenet", "'imagenet' is not a source", "`data = s3://BUCKET/PREFIX`"),
        ("data = s3://My_Bucket/x", "'My_Bucket' is not an S3 bucket name", "s3://BUCKET/PREFIX"),
        ("data = s3://bucket/a/../b", "is not a plain prefix", "s3://bucket/dir/subdir"),
        ("data = hf://datasets/org/na me", "is not a Hub repository id", "hf://datasets/ORG/NAME@main"),
        ("data = hf://spaces/org/app", "only datasets and models are fetched", "name a dataset or a model"),
        ("data = hf://datasets/org/name@bad rev", "is not a revision", "hf://datasets/org/name@main"),
        ("data = pvc:ImageNet", "'ImageNet' is not a PersistentVolumeClaim name", "kubectl get pvc"),
        ("../outside = s3://bucket/x", "leaves the run's working directory", "below the working directory"),
        (". = s3://bucket/x", "leaves the run's working directory", "below the working directory"),
        ("train.py = s3://bucket/x", "would hide the entrypoint train.py", "beside the code"),
        ("data = s3://bucket/x\ndata/train = s3://bucket/y", "data/train overlaps [ml-training.data] data", "side by"),
        ("/usr/data = s3://bucket/x", "would hide /usr", "elsewhere"),
        ("data/my set = s3://bucket/x", "is not a plain path", "data/train"),
    ],
)
def test_a_bad_dataset_is_refused_naming_its_line_key_and_fix(tmp_path, line, problem, fix):
    error = error_of(tmp_path, line)
    assert error.section == "ml-training.data"
    assert problem in error.problem and fix in error.fix, error.message
    bad_line = line.splitlines()[-1]
    text = (tmp_path / "job" / "config.ini").read_text().splitlines()
    assert text[error.line - 1] == bad_line  # the line number is the one of the mistake
    assert f"config.ini:{error.line} [ml-training.data] {bad_line.split(' =')[0]}:" in error.message


def test_a_dataset_over_a_mount_is_refused(tmp_path):
    error = error_of(tmp_path, "/data/train = s3://bucket/x", mounts="/data = pvc:imagenet")
    assert "/data/train overlaps [ml-training.mounts] /data" in error.problem


def test_mounts_and_datasets_side_by_side_are_read(tmp_path):
    spec = spec_of(tmp_path, "/train = s3://bucket/x", mounts="/data = pvc:imagenet")
    assert spec.mounts == (DataMount("/data", "imagenet"),) and spec.data == (DataSource("/train", "s3://bucket/x"),)


@pytest.mark.parametrize(
    "value, problem",
    [
        ("data/test=samples", "data/test is not a target of [ml-training.data] (its targets: data/train)"),
        ("data/train", "'data/train' is not TARGET=PATH"),
    ],
)
def test_bad_smoke_data_is_refused(tmp_path, value, problem):
    error = error_of(tmp_path, "data/train = s3://bucket/train", ml={"smoke_data": value})
    assert error.key == "smoke_data" and problem in error.problem, error.message


def test_an_unknown_section_close_to_the_data_section_is_named(tmp_path):
    job = write_job(tmp_path, "job", extra="[ml-training.dat]\ndata = s3://bucket/x\n")
    with pytest.raises(JobConfigError) as info:
        load_job_spec(job)
    assert "rename it to [ml-training.data]" in info.value.fix
