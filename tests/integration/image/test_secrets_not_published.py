"""No secret is published: a job whose directory hides private keys (after the first 8 KiB of a file, indented in
a YAML block, in the middle of a 3 MB file, saved as UTF-16, gzip-compressed), tokens (in a token.txt, a
secrets.yaml, notes) and whose git remote carries a token (`user:token@`, `token@`,
`?access_token=`) is built and pushed to the real registry; the pushed layers and config, and the run rendered
for the image with its record, are searched for every secret."""

from __future__ import annotations

import gzip
import io
import json
import os
import subprocess
import tarfile

import pytest
import requests

from tests.support.base_image import image_job
from vdk.plugin.ml_training.image import build_and_push
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs.identity import ANNOTATION_GIT_REMOTE
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.k8s.runs.record import parse
from vdk.plugin.ml_training.source import audit

pytestmark = pytest.mark.slow
ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"
KEY_BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZWQyNTUxOQ"
PEM_KEY = f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\n-----END OPENSSH PRIVATE KEY-----\n"
TOKEN = "ghp_" + "Zx9Yw8Vu7T" * 4
GITLAB = "glpat-" + "Q1w2E3r4T5y6" * 2
HF = "hf_" + "Zx9Yw8Vu7T" * 4


def git(cwd, *args):
    command = ["git", "-c", "user.email=ada@example.com", "-c", "user.name=Ada", "-C", str(cwd), *args]
    return subprocess.run(command, check=True, capture_output=True, text=True).stdout


def blob(registry, repository, digest) -> bytes:
    answer = requests.get(f"{registry.url}/v2/{repository}/blobs/{digest}", timeout=30)
    answer.raise_for_status()
    return answer.content


def layer_files(data: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(data))) as tar:
        return {m.name: tar.extractfile(m).read() if m.isfile() else b"" for m in tar.getmembers()}


@pytest.mark.parametrize(
    "remote",
    [
        f"https://ci:{TOKEN}@github.com/org/jobs.git",
        f"https://{TOKEN}@github.com/org/jobs.git",
        f"https://gitlab.example.com/org/jobs.git?access_token={GITLAB}",
        f"oauth2:{GITLAB}@gitlab.example.com:org/jobs.git",
    ],
)
def test_keys_hidden_in_files_and_tokens_in_the_remote_reach_no_layer_label_annotation_or_record(
    tmp_path, registry, base_image, remote
):
    repo = tmp_path / "repo"
    job = image_job(repo / "leaky-job", base_image)
    (job / "late.txt").write_text("x" * 9000 + "\n" + PEM_KEY)  # after the first 8 KiB
    indented = "".join(f"    {line}\n" for line in PEM_KEY.splitlines())
    (job / "values.yaml").write_text(f"tls:\n  key: |\n{indented}")  # indented, in a YAML block
    with open(job / "weights.bin", "wb") as f:  # in the middle of a 3 MB file
        f.write(os.urandom(3 << 19).replace(b"-", b"_") + PEM_KEY.encode() + b"\0" * (3 << 19))
    (job / "key16.txt").write_bytes(PEM_KEY.encode("utf-16"))  # as Windows' PowerShell saves it
    (job / "key.pem.gz").write_bytes(gzip.compress(PEM_KEY.encode()))
    (job / "token.txt").write_text("0123456789abcdef0123456789abcdef01234567\n")  # a token of no known format
    (job / "secrets.yaml").write_text(f"hub: {HF}\n")
    (job / "notes.md").write_text(f"# notes\nthe hub token: {HF}\n")
    git(repo, "init", "-q")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "job")
    git(repo, "remote", "add", "origin", remote)

    spec = load_job_spec(job)
    provenance = audit.collect(job)
    image = build_and_push(spec, f"{registry.host}/ml", provenance)

    repository = image.reference.split("/", 1)[1].split("@")[0]
    manifest = requests.get(
        f"{registry.url}/v2/{repository}/manifests/{image.digest}", headers={"Accept": ACCEPT}, timeout=30
    ).json()
    config = blob(registry, repository, manifest["config"]["digest"])
    ours = [layer_files(blob(registry, repository, layer.digest)) for layer in image.layers if layer.name != "base"]
    code = next(files for files in ours if any(name.endswith("/train.py") for name in files))
    names = {name.rsplit("/", 1)[-1] for name in code}
    assert {"train.py", "model.py"} <= names
    assert not {"late.txt", "values.yaml", "weights.bin", "key16.txt", "key.pem.gz", "token.txt"} & names
    assert not {"secrets.yaml", "notes.md"} & names
    published = [config, *[content for files in ours for content in files.values()]]
    assert not any(b"PRIVATE KEY-----" in data or KEY_BODY.encode() in data for data in published)
    assert not any(KEY_BODY.encode("utf-16-le") in data or HF.encode() in data for data in published)
    assert not any(gzip.compress(PEM_KEY.encode())[10:40] in data for data in published)
    labels = json.loads(config)["config"]["Labels"]
    public = labels["org.opencontainers.image.source"]
    assert TOKEN not in public and GITLAB not in public and "access_token" not in public and "@" not in public[:12]

    manifests = render_run(spec, image.job_image, RunInfo.create(spec, provenance), "ml", "job")
    assert manifests[0]["metadata"]["annotations"][ANNOTATION_GIT_REMOTE] == public
    record = parse(manifests[-1])
    assert record.provenance["git_remote"] == public
    rendered = json.dumps(manifests) + json.dumps([record.spec, record.provenance, record.manifests])
    for secret in (TOKEN, GITLAB, "access_token"):
        assert secret not in rendered and secret.encode() not in config
