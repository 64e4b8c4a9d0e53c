"""A credential written into a job is refused, wherever it is written and whoever builds the spec: in
[ml-training.env], in `args` and `smoke_args` (which go into the image's command, the manifests and the run
record), in a registry address; and no refusal shows it (job/literal_secrets.py)."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import load_job_spec

HF = "hf_" + "AbCdEf0123" * 4
AWS = "AKIA" + "ABCDEFGH12345678"
LONG = "q8Zr2LmX0pVt7Ks4Wn9Yb3"  # a secret of no known format: only its option's name says what it is


def refusal(tmp_path, settings=None, **job) -> JobConfigError:
    path = write_job(tmp_path, "secret-job", team="vision", **job)
    with pytest.raises(JobConfigError) as caught:
        load_job_spec(path, settings)
    return caught.value


@pytest.mark.parametrize(
    "key, value, position, kind",
    [
        ("args", f"--epochs 3 --hf-token {HF}", 4, "a Hugging Face token"),
        ("args", f"--api-key={LONG} --epochs 3", 1, "a secret (the value of --api-key, which looks like one)"),
        ("args", f"--aws {AWS}", 2, "an AWS access key id"),
        ("args", "--data https://bob:hunter2@data.example.com/set", 2, "a password in a URL (user:password@)"),
        ("smoke_args", f"--steps 2 --password {LONG}", 4, "a secret (the value of --password, which looks like one)"),
    ],
)
def test_a_credential_in_the_arguments_is_refused_without_showing_it(tmp_path, key, value, position, kind):
    error = refusal(tmp_path, ml={key: value})
    assert error.key == key and f"argument {position} is {kind}" in error.problem
    assert "the run's manifests and its record" in error.problem
    assert "[ml-training.secrets]" in error.fix and "os.environ['API_TOKEN']" in error.fix
    for secret in (HF, LONG, AWS, "hunter2"):
        assert secret not in error.message


def test_a_credential_in_the_arguments_from_vdk_configuration_says_where_it_came_from(tmp_path):
    error = refusal(tmp_path, settings={"args": f"--hf-token {HF}"})
    assert (
        "the value from VDK configuration (VDK_ML_TRAINING_ARGS): argument 2 is a Hugging Face token" in error.problem
    )
    assert HF not in error.message


@pytest.mark.parametrize(
    "args",
    [
        "--max-tokens 4096 --tokenizer gpt2-medium-finetuned-v2",
        "--key-column label --secret-sauce 3",
        "--output s3://bucket/run-2024-01-01T00:00:00 --contact ada@example.com",
    ],
)
def test_arguments_that_only_look_alike_pass(tmp_path, args):
    spec = load_job_spec(write_job(tmp_path, "fine-job", ml={"args": args}))
    assert " ".join(spec.args) == args


def test_a_spec_built_or_changed_in_code_checks_itself(tmp_path):
    spec = load_job_spec(write_job(tmp_path, "fine-job", ml={"args": "--epochs 3"}))
    for change in ({"args": ("--token", HF)}, {"smoke_args": ("--key", AWS)}, {"env": (("HF_TOKEN", HF),)}):
        with pytest.raises(JobConfigError) as caught:
            dataclasses.replace(spec, **change)
        assert HF not in caught.value.message and AWS not in caught.value.message


def test_a_url_with_a_password_in_the_environment_is_refused(tmp_path):
    error = refusal(tmp_path, env={"DATABASE_URL": "postgres://ml:hunter2@db.example.com/runs"})
    assert error.key == "DATABASE_URL" and "a password in a URL" in error.problem and "hunter2" not in error.message


@pytest.mark.parametrize("where", ["job", "setting"])
def test_a_registry_with_user_and_password_is_refused_without_printing_the_password(tmp_path, where):
    address = "bob:hunter2@registry.example.com/ml"
    job = {"ml": {"registry": address}} if where == "job" else {}
    error = refusal(tmp_path, settings={"registry": address} if where == "setting" else None, **job)
    assert "hunter2" not in error.message
    assert "'bob:***@registry.example.com/ml' holds credentials (user:password@)" in error.problem
    assert "registry = registry.example.com/ml" in error.fix or "REGISTRY=registry.example.com/ml" in error.fix
    assert "podman login registry.example.com" in error.fix
