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


# --- every field: by name and by shape, the sweep's values where they go, config.ini's comments ---------------

WANDB = "0123456789abcdef0123456789abcdef01234567"  # a W&B API key: 40 hex digits, no prefix of its own
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # base64, with its `/`


@pytest.mark.parametrize(
    "args, position, kind",
    [
        ("--password hunter2!", 2, "a password (the value of --password)"),
        ("--db-password=hunter2!", 1, "a password (the value of --db-password)"),
        (f"--wandb-key {WANDB}", 2, "a key (the value of --wandb-key, which has a key's shape)"),
        (f"--aws-secret-access-key {AWS_SECRET}", 2, "a secret (the value of --aws-secret-access-key"),
    ],
)
def test_an_option_named_like_a_credential_is_refused_by_its_name_and_its_values_shape(tmp_path, args, position, kind):
    error = refusal(tmp_path, ml={"args": args})
    assert f"argument {position} is {kind}" in error.problem
    for secret in ("hunter2", WANDB, AWS_SECRET):
        assert secret not in error.message


@pytest.mark.parametrize(
    "name, value, kind",
    [
        ("DB_PASSWORD", "hunter2!", "a password (the value of DB_PASSWORD)"),
        ("AWS_SECRET_ACCESS_KEY", AWS_SECRET, "a secret (its name says so"),
        ("WANDB_KEY", WANDB, "a key (the value of WANDB_KEY"),
        ("SESSION", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0", "a JSON Web Token"),
    ],
)
def test_an_env_value_is_refused_by_its_name_and_by_its_shape(tmp_path, name, value, kind):
    error = refusal(tmp_path, env={name: value})
    assert error.key == name and kind in error.problem and value not in error.message


@pytest.mark.parametrize(
    "env",
    [
        {"TOKENIZER_NAME": "meta-llama/Llama-2-7b-hf"},
        {"PASSWORD_FILE": "/run/secrets/db-password"},
        {"HF_TOKEN_PATH": "models/Bert12345678Base"},
        {"SORT_KEY": "eval_loss", "CACHE_KEY": "model_v2_2024_01_01"},
        {"MAX_TOKENS": "512"},
    ],
)
def test_values_that_only_look_alike_pass(tmp_path, env):
    spec = load_job_spec(write_job(tmp_path, "fine-env", env=env))
    assert dict(spec.env) == env


def sweep_refusal(tmp_path, sweep: str, args: str, env=None) -> JobConfigError:
    return refusal(
        tmp_path, ml={"args": args}, env=env, extra=f"\n[ml-training.sweep]\n{sweep}\nmetric = loss\ntrials = 4\n"
    )


@pytest.mark.parametrize(
    "sweep, args, env, where",
    [
        (f"hf = choice({HF}, x)", "--hf ${hf}", None, "argument 2 of args"),
        ("lr = 1, 2\ntok = choice(a, " + HF + ")", "--lr ${lr}", {"TOKEN": "${tok}"}, "[ml-training.env] TOKEN"),
        ("pw = choice(hunter2, letmein)", "--password ${pw}", None, "argument 2 of args"),
        (f"k = {WANDB}, 0", "--wandb-key=${k}", None, "argument 1 of args"),
    ],
)
def test_a_credential_among_a_sweeps_values_is_refused_where_it_would_go(tmp_path, sweep, args, env, where):
    error = sweep_refusal(tmp_path, sweep, args, env)
    assert error.section == "ml-training.sweep"
    assert (
        f"once it is in {where}" in error.problem and "the trials' pods, the study and the run record" in error.problem
    )
    for secret in (HF, WANDB, "hunter2"):
        assert secret not in error.message


def test_a_sweep_built_in_code_checks_its_values_too(tmp_path):
    job = write_job(tmp_path, "fine-sweep", ml={"args": "--hf ${hf}"},
                    extra="\n[ml-training.sweep]\nhf = a, b\nmetric = loss\n")  # fmt: skip
    spec = load_job_spec(job)
    values = dataclasses.replace(spec.sweep.parameters[0], values=("a", HF))
    with pytest.raises(JobConfigError) as caught:
        dataclasses.replace(spec, sweep=dataclasses.replace(spec.sweep, parameters=(values,)))
    assert "value 2 of the parameter hf is a Hugging Face token" in caught.value.problem


@pytest.mark.parametrize(
    "line, kind",
    [
        (f"# the token for the hub: {HF}", "a Hugging Face token in a comment"),
        (f"; old key {AWS}", "an AWS access key id in a comment"),
        ("[vdk]\nnotify = https://bob:hunter2@hooks.example.com/x", "a password in a URL (user:password@)"),
    ],
)
def test_a_credential_anywhere_in_config_ini_is_refused_with_its_line(tmp_path, line, kind):
    path = write_job(tmp_path, "commented", ml={"args": "--epochs 1"})
    config = path / "config.ini"
    config.write_text(config.read_text() + "\n" + line + "\n")
    with pytest.raises(JobConfigError) as caught:
        load_job_spec(path)
    number = len(config.read_text().splitlines())
    assert caught.value.line == number and f"line {number} holds {kind}" in caught.value.problem
    assert HF not in caught.value.message and "hunter2" not in caught.value.message
