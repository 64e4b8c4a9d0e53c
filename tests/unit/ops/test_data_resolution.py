"""A dataset's credentials that are missing or refused get the fix of where they came from: a local run reads
them from the shell (export them; [ml-training.secrets] is for the cluster), a deploy from the cluster's Secrets
(map them, or put credentials that may read it in the Secret). The pod's own fix (the data step) stays as the
source wrote it. The stores themselves: tests/integration/datafetch/."""

from __future__ import annotations

from tests.support.jobs import write_job
from vdk.plugin.ml_training.datafetch import hf_source
from vdk.plugin.ml_training.datafetch import s3_source
from vdk.plugin.ml_training.datafetch.source_errors import DENIED
from vdk.plugin.ml_training.datafetch.source_errors import SourceError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.ops.data_resolution import source_error

MAPPED = (
    "[ml-training.secrets]\nAWS_ACCESS_KEY_ID = s3-credentials/access-key\n"
    "AWS_SECRET_ACCESS_KEY = s3-credentials/secret-key\n"
)


def spec_of(tmp_path, secrets: str = MAPPED, data: str = "data/train = s3://bucket/train"):
    return load_job_spec(write_job(tmp_path, "vision", extra=f"[ml-training.data]\n{data}\n{secrets}"))


def no_credentials() -> SourceError:
    """What the data tools answer when boto3 finds no credentials (s3_source's translation)."""
    return SourceError(
        "no credentials to read s3://bucket/train",
        s3_source.CREDENTIAL_FIX,
        DENIED,
        "data/train",
        s3_source.CREDENTIALS,
        s3_source.CREDENTIAL_FIX,
    )


def test_a_local_run_without_the_credentials_in_the_shell_is_told_which_variables_to_export(tmp_path):
    error = source_error(spec_of(tmp_path), no_credentials(), shell={})
    assert error.fix.startswith("export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... in this shell, then run again")
    assert "a local run reads the credentials from your shell" in error.fix
    # config.ini maps them already: the fix does not send the user there
    assert "map the credentials" not in error.fix and "map them" not in error.fix
    assert error.key == "data/train" and error.problem.endswith("no credentials to read s3://bucket/train")


def test_a_local_run_names_only_the_variable_that_is_missing(tmp_path):
    error = source_error(spec_of(tmp_path), no_credentials(), shell={"AWS_ACCESS_KEY_ID": "AKIA..."})
    assert error.fix.startswith("export AWS_SECRET_ACCESS_KEY=... in this shell")


def test_a_local_run_whose_shell_credentials_are_refused_is_told_so(tmp_path):
    shell = {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"}
    error = source_error(spec_of(tmp_path), no_credentials(), shell=shell)
    assert error.fix.startswith("the credentials exported in your shell (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY)")
    assert "export ones that may" in error.fix


def test_a_local_run_of_a_job_that_maps_nothing_is_also_told_to_map_them_for_the_cluster(tmp_path):
    error = source_error(spec_of(tmp_path, secrets=""), no_credentials(), shell={})
    assert error.fix.startswith("export AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... in this shell")
    assert error.fix.endswith(
        "for the cluster's pods, map them in [ml-training.secrets] too (`AWS_ACCESS_KEY_ID = "
        "s3-credentials/access-key`, `AWS_SECRET_ACCESS_KEY = s3-credentials/secret-key`)"
    )


def test_a_deploy_names_the_secret_that_holds_refused_credentials(tmp_path):
    both = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    error = source_error(spec_of(tmp_path), no_credentials(), shell={}, from_secrets=both)
    assert error.fix.startswith(
        "the Secret s3-credentials holds credentials (s3-credentials/access-key, s3-credentials/secret-key) that may "
        "not read it"
    )
    create = "kubectl create secret generic s3-credentials --from-literal=access-key=... --from-literal=secret-key=..."
    assert create in error.fix
    assert "export" not in error.fix


def test_a_deploy_of_a_job_that_maps_nothing_is_told_to_map_them(tmp_path):
    error = source_error(spec_of(tmp_path, secrets=""), no_credentials(), shell={}, from_secrets=set())
    assert error.fix.startswith(
        "map them in [ml-training.secrets] (`AWS_ACCESS_KEY_ID = s3-credentials/access-key`, "
        "`AWS_SECRET_ACCESS_KEY = s3-credentials/secret-key`) to a Secret that may read it"
    )


def test_a_deploy_that_could_not_read_the_secrets_says_the_shell_was_used(tmp_path):
    error = source_error(spec_of(tmp_path), no_credentials(), shell={"AWS_ACCESS_KEY_ID": "a"}, from_secrets=set())
    assert "cannot be read here, so the data was pinned with your shell's values" in error.fix


def test_a_token_fix_keeps_what_is_not_about_credentials(tmp_path):
    spec = spec_of(tmp_path, secrets="", data="data/train = hf://datasets/org/gated")
    gated = SourceError(
        "hf://datasets/org/gated is gated: the token given may not read it",
        f"{hf_source.TOKEN_FIX}, and {hf_source.GATED}",
        DENIED,
        "data/train",
        hf_source.CREDENTIALS,
        hf_source.TOKEN_FIX,
    )
    error = source_error(spec, gated, shell={})
    assert error.fix.startswith("export HF_TOKEN=... in this shell, then run again")
    assert "map it in [ml-training.secrets] too (`HF_TOKEN = hf-credentials/token`)" in error.fix
    assert error.fix.endswith(hf_source.GATED)


def test_a_problem_that_is_not_the_credentials_keeps_its_fix(tmp_path):
    missing = SourceError("bucket nope does not exist at AWS S3", "correct the bucket's name", target="data/train")
    assert source_error(spec_of(tmp_path), missing, shell={}).fix == "correct the bucket's name"


def test_the_credentials_cross_the_data_tools_answer():
    again = SourceError.from_dict(no_credentials().to_dict())
    assert again.credentials == s3_source.CREDENTIALS and again.credential_fix == s3_source.CREDENTIAL_FIX
    # in a pod, where the data step reads the Secrets, the fix is the source's own
    assert "[ml-training.secrets]" in str(again)
