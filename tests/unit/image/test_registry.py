"""Building and pushing against the real registry process (Debian's docker-registry), pulled and
run with podman; faults injected by a loopback proxy; credentials checked by an htpasswd registry."""

from __future__ import annotations

import base64
import gzip
import io
import json
import shutil
import subprocess
import tarfile

import pytest
import requests

from tests.support.registry import Registry
from tests.support.registry import TokenServer
from tests.support.registry import self_signed_cert
from vdk.plugin.ml_training.image import RetryPolicy
from vdk.plugin.ml_training.image import build_and_push
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit

pytestmark = pytest.mark.slow
FAST_RETRY = RetryPolicy(attempts=4, first_delay=0.01, max_delay=0.05)
ACCEPT = "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"


def build(job, registry_host, **kwargs):
    return build_and_push(load_job_spec(job), f"{registry_host}/ml", audit.collect(job), **kwargs)


def _ca(registry):
    return str(registry.tls[0]) if registry.tls else True


def get_manifest(registry, repo, ref, auth=None):
    r = requests.get(
        f"{registry.url}/v2/{repo}/manifests/{ref}", headers={"Accept": ACCEPT}, auth=auth, verify=_ca(registry)
    )
    r.raise_for_status()
    return r.json(), r.headers["Docker-Content-Digest"]


def get_blob(registry, repo, digest, auth=None):
    r = requests.get(f"{registry.url}/v2/{repo}/blobs/{digest}", auth=auth, verify=_ca(registry))
    r.raise_for_status()
    return r.content


def tar_names(blob: bytes) -> set[str]:
    with tarfile.open(fileobj=io.BytesIO(gzip.decompress(blob))) as tar:
        return {m.name for m in tar.getmembers()}


def git(cwd, *args):
    return subprocess.run(
        ["git", "-c", "user.email=ada@example.com", "-c", "user.name=Ada", "-C", str(cwd), *args],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


@pytest.fixture(scope="module")
def other_registry(tmp_path_factory):
    server = Registry(tmp_path_factory.mktemp("other-registry"))
    yield server
    server.stop()


def trust(auth_registry, tmp_path):
    """The registry's CA where podman looks for it: $XDG_CONFIG_HOME/containers/certs.d/<host>/ca.crt."""
    certs = tmp_path / "xdg-config" / "containers" / "certs.d" / auth_registry.host
    certs.mkdir(parents=True)
    shutil.copy(auth_registry.tls[0], certs / "ca.crt")


def docker_login(tmp_path, host, user, password):
    config = tmp_path / "docker-config" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}))


@pytest.fixture(scope="module")
def token_registry(tmp_path_factory):
    """docker-registry with bearer-token auth (a token service as Docker Hub, GHCR or Harbor run), TLS."""
    root = tmp_path_factory.mktemp("token-registry")
    cert, key = self_signed_cert(root)
    tokens = TokenServer(cert, key, users={"ada": "correct-horse", "robot": "robot-secret"})
    server = Registry(root / "server", tls=(cert, key), token=tokens)
    server.tokens = tokens
    yield server
    server.stop()
    tokens.stop()


def test_only_loopback_and_listed_registries_may_use_plain_http(monkeypatch):
    from vdk.plugin.ml_training.image.registry import allows_plain_http

    assert allows_plain_http("127.0.0.1:5000") and allows_plain_http("localhost:5000")
    assert not allows_plain_http("registry.internal:5000")
    monkeypatch.setenv("VDK_ML_TRAINING_INSECURE_REGISTRIES", "registry.internal:5000, other:80")
    assert allows_plain_http("registry.internal:5000") and not allows_plain_http("registry.internal")


# Stands in for torch's launcher (torch.distributed.run) in the image test below, so that the
# image's command runs without the real torch: after torchrun's flags, `-m MODULE ARGS` runs as
# the only rank. (The end-to-end tests run the real torch from the dependency layer.)
TORCHRUN_STAND_IN = """import os
import runpy
import sys

args = sys.argv[1:]
flags = []
while args and args[0] != "-m":
    flags.append(args.pop(0))
print("launcher flags:", " ".join(flags), flush=True)
for name, value in (("RANK", "0"), ("LOCAL_RANK", "0"), ("WORLD_SIZE", "1")):
    os.environ.setdefault(name, value)
sys.argv = args[1:]
runpy.run_module(args[1], run_name="__main__", alter_sys=True)
"""

TRAIN_REPORT = """import os
import sys

if __name__ == "__main__":
    import torch

    print(f"interpreter={sys.executable} python={sys.version_info[0]}.{sys.version_info[1]}")
    print(f"torch_from={torch.__file__} cwd={os.getcwd()} args={sys.argv[1:]}")
"""


def _training_container(manifest: dict) -> dict:
    if manifest["kind"] == "PyTorchJob":
        return manifest["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]
    if manifest["kind"] == "TrainJob":
        return manifest["spec"]["trainer"]
    return manifest["spec"]["template"]["spec"]["containers"][0]
