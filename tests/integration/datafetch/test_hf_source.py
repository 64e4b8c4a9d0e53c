"""hf:// datasets and models through huggingface_hub's own code, pointed at a local Hub endpoint (HF_ENDPOINT):
a revision pinned at deploy to its commit, and the data step, run as a pod runs it, fetching exactly that commit
after the branch moved on; a private repository read with the token of [ml-training.secrets]; a repository or
revision that is not there stops the deploy naming the config.ini line."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.data_step import run_data_step
from tests.support.jobs import write_job
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.ops.data_resolution import resolve_data

TOKEN = "hf_" + "k" * 34
SECRETS = {"hf-credentials": {"token": TOKEN}}

pytestmark = pytest.mark.usefixtures("isolated_environment")


def job_of(tmp_path, hub, data: str):
    extra = f"[ml-training.data]\n{data}\n[ml-training.secrets]\nHF_TOKEN = hf-credentials/token\n"
    return load_job_spec(write_job(tmp_path, "nlp", env={"HF_ENDPOINT": hub.url}, extra=extra))


def test_a_revision_is_pinned_to_its_commit_and_fetched_at_it_after_the_branch_moved(tmp_path, hf_hub):
    first = hf_hub.commit("datasets", "org/tok", {"train.jsonl": b'{"text": "one"}\n', "meta/info.json": b"{}"})
    model = hf_hub.commit("models", "org/tiny", {"config.json": b'{"layers": 2}'}, branch="v1")
    spec = job_of(tmp_path, hf_hub, "data/tok = hf://datasets/org/tok@main\nmodels/tiny = hf://org/tiny@v1")
    tok, tiny = resolve_data(spec, print, shell={"HF_TOKEN": TOKEN})
    assert (tok.version, tok.fingerprint, tok.files) == (first, first, 2)
    assert tiny.version == model and tiny.describe_version() == f"commit {model}"
    hf_hub.commit("datasets", "org/tok", {"train.jsonl": b'{"text": "two"}\n'})  # main moves on

    manifest = render_run(spec, IMAGE, dataclasses.replace(make_run(spec), data=(tok, tiny)), "ml", "pytorchjob")[0]
    (init,) = manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["initContainers"]
    cache = tmp_path / "cache"
    hf_hub.requests.clear()
    done = run_data_step(init["command"], init["env"], {layout.DATA_CACHE_DIR: cache}, SECRETS)
    assert done.returncode == 0, done.stderr
    fetched = cache / "vdk-data" / tok.cache_key
    assert (fetched / "train.jsonl").read_bytes() == b'{"text": "one"}\n' and (fetched / "meta/info.json").exists()
    assert not (fetched / ".cache").exists()  # the code sees the dataset's files only
    assert (cache / "vdk-data" / tiny.cache_key / "config.json").read_bytes() == b'{"layers": 2}'
    files = [path for method, path in hf_hub.requests if "/resolve/" in path]
    assert files and all(f"/resolve/{first}/" in p or f"/resolve/{model}/" in p for p in files)  # by commit only


def test_a_private_repository_is_read_with_the_secret_s_token_and_refused_without(tmp_path, hf_hub):
    hf_hub.commit("datasets", "org/private", {"x.txt": b"x"}, token=TOKEN)
    spec = job_of(tmp_path, hf_hub, "data/private = hf://datasets/org/private")
    (pin,) = resolve_data(spec, print, shell={"HF_TOKEN": TOKEN})
    assert pin.files == 1
    with pytest.raises(JobConfigError) as info:
        resolve_data(spec, print, shell={"HF_TOKEN": "hf_" + "w" * 34})
    assert "or it is private and cannot be read with the token given" in info.value.problem
    # a local run with HF_TOKEN mapped: the shell's token is the one to change (issue 34: the fix for where it runs)
    assert "the credentials exported in your shell (HF_TOKEN) may not read it" in info.value.fix
    assert info.value.key == "data/private"


@pytest.mark.parametrize(
    "source, problem",
    [
        ("hf://datasets/org/missing", "no such repository"),
        ("hf://datasets/org/there@v9", "org/there has no revision 'v9'"),
    ],
)
def test_a_repository_or_revision_that_is_not_there_stops_the_deploy_naming_the_line(tmp_path, hf_hub, source, problem):
    hf_hub.commit("datasets", "org/there", {"x.txt": b"x"})
    spec = job_of(tmp_path, hf_hub, f"data/ok = hf://datasets/org/there\ndata/bad = {source}")
    with pytest.raises(JobConfigError) as info:
        resolve_data(spec, print, shell={"HF_TOKEN": TOKEN})
    error = info.value
    assert error.key == "data/bad" and problem in error.problem, error.message
    assert spec.config_path.read_text().splitlines()[error.line - 1] == f"data/bad = {source}"
