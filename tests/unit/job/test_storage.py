"""[ml-training.mounts], [ml-training.secrets], output_pvc and the refusal of literal credentials: what a
user writes in config.ini, and the message with the fix for every mistake."""

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import DataMount
from vdk.plugin.ml_training.job import SecretEnv
from vdk.plugin.ml_training.job import load_job_spec

HF_TOKEN = "hf_" + "aB3dE5gH7jK9mN1pQ3sT5vW7yZ9bC1dE3f"


def spec_of(tmp_path, extra: str = "", env=None, ml=None, settings=None):
    return load_job_spec(write_job(tmp_path, "job", ml=ml or {}, env=env, extra=extra), settings)


def error_of(tmp_path, **kwargs) -> JobConfigError:
    with pytest.raises(JobConfigError) as info:
        spec_of(tmp_path, **kwargs)
    return info.value


def test_mounts_secrets_and_the_output_claim_are_read(tmp_path):
    spec = spec_of(
        tmp_path,
        "[ml-training.mounts]\n/data = pvc:imagenet\n/models/base = pvc:hub-cache/llama/\n"
        "[ml-training.secrets]\nHF_TOKEN = hf-credentials/token\nWANDB_API_KEY = wandb/api-key\n",
        ml={"output_pvc": "ml-outputs"},
    )
    assert spec.mounts == (DataMount("/data", "imagenet"), DataMount("/models/base", "hub-cache", "llama"))
    assert spec.secrets == (
        SecretEnv("HF_TOKEN", "hf-credentials", "token"),
        SecretEnv("WANDB_API_KEY", "wandb", "api-key"),
    )
    assert spec.output_pvc == "ml-outputs"


def test_the_output_claim_comes_from_vdk_configuration_and_is_not_part_of_the_fingerprint(tmp_path):
    one = spec_of(tmp_path / "a", settings={"output_pvc": "team-outputs"})
    other = spec_of(tmp_path / "b")
    assert one.output_pvc == "team-outputs" and other.output_pvc is None
    assert one.fingerprint() == other.fingerprint()  # where outputs go does not change the image


@pytest.mark.parametrize(
    "line, problem, fix",
    [
        ("data = pvc:imagenet", "'data' is not an absolute path", "/data = pvc:imagenet"),
        ("./data = pvc:imagenet", "datasets are mounted at absolute paths", "[ml-training.data]"),
        ("/data/../etc = pvc:x", "is not a plain absolute path", "/data = pvc:imagenet"),
        ("/usr/share/data = pvc:x", "would hide /usr", "/data = pvc:NAME"),
        ("/opt/vdk-ml/job/data = pvc:x", "would hide /opt/vdk-ml", "/data = pvc:NAME"),
        ("/tmp = pvc:x", "would make /tmp of the training containers read-only", "below /tmp (`/tmp/data`)"),
        ("/var = pvc:x", "would make /var/tmp of the training containers read-only", "/data = pvc:NAME"),
        ("/var/tmp = pvc:x", "the training writes there", "/data = pvc:NAME"),
        ("/data = imagenet", "'imagenet' is not a volume source", "/data = pvc:NAME"),
        ("/data = pvc:ImageNet", "'ImageNet' is not a PersistentVolumeClaim name", "kubectl get pvc"),
        ("/data = hf://datasets/squad", "is fetched, not mounted", "[ml-training.data] instead: `/data = hf://"),
        ("/data = gs://bucket/x", "only PersistentVolumeClaims can be mounted", "copy the dataset into"),
        ("/data = pvc:x/../y", "is not a plain directory of the claim", "pvc:x/dir/subdir"),
    ],
)
def test_a_bad_mount_says_what_to_write(tmp_path, line, problem, fix):
    error = error_of(tmp_path, extra=f"[ml-training.mounts]\n{line}\n")
    assert error.section == "ml-training.mounts"
    assert problem in error.problem and fix in error.fix, error.message


def test_a_claim_below_tmp_is_fine(tmp_path):
    spec = spec_of(tmp_path, extra="[ml-training.mounts]\n/tmp/data = pvc:imagenet\n")
    assert [m.path for m in spec.mounts] == ["/tmp/data"]


def test_a_mount_inside_another_is_refused(tmp_path):
    error = error_of(tmp_path, extra="[ml-training.mounts]\n/data = pvc:a\n/data/b = pvc:b\n")
    assert "/data/b is inside /data" in error.problem and "/b" in error.fix


@pytest.mark.parametrize(
    "line, problem",
    [
        ("HF_TOKEN = hf-credentials", "'hf-credentials' is not SECRET/KEY"),
        (f"HF_TOKEN = {HF_TOKEN}", "this looks like the secret itself"),
        ("HF_TOKEN = HF/token", "'HF' is not a Secret name"),
        ("HF_TOKEN = hf/to ken", "'to ken' is not a key of a Secret"),
        ("RANK = s/k", "RANK is set by the launcher"),
        ("VDK_ML_TRAINING_X = s/k", "VDK_ML_TRAINING_* names are the plugin's own"),
        ("1X = s/k", "'1X' is not an environment variable name"),
    ],
)
def test_a_bad_secret_reference_says_what_to_write(tmp_path, line, problem):
    error = error_of(tmp_path, extra=f"[ml-training.secrets]\n{line}\n")
    assert error.section == "ml-training.secrets" and problem in error.problem, error.message


def test_a_variable_is_a_secret_or_a_value_not_both(tmp_path):
    error = error_of(tmp_path, env={"HF_TOKEN": "x"}, extra="[ml-training.secrets]\nHF_TOKEN = hf/token\n")
    assert "also set in [ml-training.env]" in error.problem


@pytest.mark.parametrize(
    "name, value, kind",
    [
        ("HF_TOKEN", HF_TOKEN, "a Hugging Face token"),
        ("MY_SETTING", HF_TOKEN, "a Hugging Face token"),  # whatever the name
        ("AWS_ACCESS_KEY_ID", "AKIAIOSFODNN7EXAMPLE", "an AWS access key id"),
        ("GITHUB", "ghp_" + "a1" * 18, "a GitHub token"),
        ("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567", "a secret (its name says so"),
        ("DB_PASSWORD", "s3cretPassw0rd-long", "a secret (its name says so"),
    ],
)
def test_a_literal_credential_in_the_env_section_is_refused_with_the_way_to_do_it(tmp_path, name, value, kind):
    error = error_of(tmp_path, env={name: value})
    assert error.section == "ml-training.env" and error.key == name
    assert kind in error.problem and "goes into git" in error.problem
    assert f"[ml-training.secrets]: `{name} = " in error.fix and "kubectl create secret generic" in error.fix
    assert value not in error.message  # the message does not repeat the secret


@pytest.mark.parametrize(
    "name, value",
    [
        ("HF_TOKEN_PATH", "/var/run/secrets/hf"),  # a path, not a token
        ("TOKENIZERS_PARALLELISM", "false"),
        ("HF_HOME", "/data/hf"),
        ("NCCL_DEBUG", "WARN"),
        ("MODEL_NAME", "meta-llama/Llama-3.1-8B-Instruct"),
        ("RUN_ID", "abcdef0123456789abcdef"),  # long and random, but its name says nothing of a secret
    ],
)
def test_ordinary_settings_are_not_taken_for_credentials(tmp_path, name, value):
    assert spec_of(tmp_path, env={name: value}).env_dict[name] == value


def test_a_misspelt_section_is_named(tmp_path):
    error = error_of(tmp_path, extra="[ml-training.secret]\nHF_TOKEN = hf/token\n")
    assert "unknown section [ml-training.secret]" in error.problem and "[ml-training.secrets]" in error.fix
