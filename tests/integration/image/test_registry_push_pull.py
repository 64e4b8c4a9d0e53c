"""Building and pushing against the real registry process (Debian's docker-registry), pulled and
run with podman; faults injected by a loopback proxy; credentials checked by an htpasswd registry."""

from __future__ import annotations

import base64
import gzip
import io
import json
import os
import re
import shutil
import subprocess
import tarfile

import pytest
import requests

from tests.support.base_image import build_rootfs
from tests.support.base_image import image_job
from tests.support.base_image import push_base
from tests.support.debian_base import RUN_OPTIONS
from tests.support.debian_base import run as run_image
from tests.support.registry import Fault
from tests.support.registry import FaultProxy
from tests.support.registry import Registry
from tests.support.registry import TokenServer
from tests.support.registry import free_port
from tests.support.registry import podman
from tests.support.registry import self_signed_cert
from tests.support.wheels import make_wheel
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.image import BaseImageError
from vdk.plugin.ml_training.image import RegistryAuthError
from vdk.plugin.ml_training.image import RegistryError
from vdk.plugin.ml_training.image import RegistryUnreachableError
from vdk.plugin.ml_training.image import RetryPolicy
from vdk.plugin.ml_training.image import StderrProgress
from vdk.plugin.ml_training.image import build_and_push
from vdk.plugin.ml_training.image import plan_image
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
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


def test_same_tree_gives_the_same_digest_twice_and_from_two_checkouts(tmp_path, registry, base_image):
    origin = tmp_path / "origin"
    image_job(origin / "jobs" / "train-job", base_image)
    git(origin, "init", "-q")
    git(origin, "add", ".")
    git(origin, "commit", "-qm", "job")
    for clone in ("checkout-a", "checkout-b"):
        git(tmp_path, "clone", "-q", str(origin), clone)
    job_a = tmp_path / "checkout-a" / "jobs" / "train-job"
    job_b = tmp_path / "checkout-b" / "jobs" / "train-job"
    os.utime(job_b / "train.py", (1, 1))  # checkouts differ in times; images must not

    planned = plan_image(load_job_spec(job_a), f"{registry.host}/ml", audit.collect(job_a))
    first = build(job_a, registry.host)
    again = build(job_a, registry.host)
    other = build(job_b, registry.host)

    assert first.digest == again.digest == other.digest
    assert first.reference == f"{registry.host}/ml/train-job@{first.digest}"
    assert first.tag_reference == planned.reference  # the dry run named the tag the build pushed
    _, tag_digest = get_manifest(registry, "ml/train-job", first.tag_reference.rpartition(":")[2])
    assert tag_digest == first.digest
    assert [layer.action for layer in again.layers] == ["present"] * len(again.layers)  # HEAD before upload
    assert first.base_reference.startswith(f"{registry.host}/base/busybox@sha256:")


def test_one_changed_file_changes_only_the_code_layer_config_and_manifest(tmp_path, registry, base_image):
    job = image_job(tmp_path / "change-job", base_image)
    before = build(job, registry.host)
    (job / "model.py").write_text("def train():\n    print('a one-line change')\n")
    shown = io.StringIO()
    after = build(job, registry.host, progress=StderrProgress(shown))
    lines = shown.getvalue().splitlines()
    assert lines[0] == f"Base image {base_image}" and lines[2] == f"Pushing to {registry.host}/ml/change-job"
    # sizes in the unit that reads (a few hundred bytes, not `0.00 MB`), counts agreeing with their noun
    assert re.fullmatch(r"Code: 7 files, (\d+ B|\d+\.\d KB), 4 excluded", lines[1]), lines[1]
    pushed = rf"Pushed {re.escape(after.reference)} \((\d+ B|\d+\.\d KB) sent, 2 layers reused\)"
    assert re.fullmatch(pushed, lines[3]), lines
    assert len(lines) == 4

    old, _ = get_manifest(registry, "ml/change-job", before.digest)
    new, _ = get_manifest(registry, "ml/change-job", after.digest)
    assert after.digest != before.digest
    assert old["config"]["digest"] != new["config"]["digest"]
    assert [layer["digest"] for layer in old["layers"][:-1]] == [layer["digest"] for layer in new["layers"][:-1]]
    assert old["layers"][-1]["digest"] != new["layers"][-1]["digest"]
    assert [(layer.name, layer.action) for layer in after.layers] == [
        ("base", "present"),
        ("runtime", "present"),
        ("code", "uploaded"),
    ]
    assert after.uploaded_bytes < 2000  # the code layer alone, whatever the base's size
    config = json.loads(get_blob(registry, "ml/change-job", new["config"]["digest"]))
    old_config = json.loads(get_blob(registry, "ml/change-job", old["config"]["digest"]))
    assert config["rootfs"]["diff_ids"][:-1] == old_config["rootfs"]["diff_ids"][:-1]


def test_excluded_files_are_absent_from_the_pushed_layer(tmp_path, registry, base_image):
    job = image_job(tmp_path / "secret-job", base_image)
    (job / "id_ed25519").write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nxx\n-----END OPENSSH PRIVATE KEY-----\n")
    image = build(job, registry.host)
    manifest, _ = get_manifest(registry, "ml/secret-job", image.digest)
    code = tar_names(get_blob(registry, "ml/secret-job", manifest["layers"][-1]["digest"]))
    prefix = layout.JOB_DIR.lstrip("/")
    assert {f"{prefix}/train.py", f"{prefix}/model.py", f"{prefix}/lib/util.py", f"{prefix}/config.ini"} <= code
    for secret in (".env", "id_ed25519", "data", "data/big.csv", "train.log", "__pycache__"):
        assert f"{prefix}/{secret}" not in code, secret


def test_the_pushed_image_pulls_and_runs_with_podman(tmp_path, registry, base_image, podman_root):
    wheelhouse = tmp_path / "wheels"
    make_wheel(wheelhouse, "tinydep", "1.0", console_script="tiny")
    job = image_job(tmp_path / "run-job", base_image)
    (job / "requirements.txt").write_text(f"--no-index\n--find-links {wheelhouse}\ntinydep==1.0\n")
    image = build(job, registry.host)
    assert image.dependencies == (("tinydep", "1.0"),) and image.python_version == "3.11"
    assert image.python == "python"  # found in the busybox base: /usr/local/bin/python

    podman(podman_root, "pull", "--tls-verify=false", image.reference)
    run = podman(podman_root, "run", "--rm", *RUN_OPTIONS, image.reference)
    report = dict(line.split("=", 1) for line in run.stdout.splitlines() if "=" in line)
    launch = layout.launch_command(load_job_spec(job), "python")
    assert report["argv"] == " ".join(launch[1:])  # the image's Cmd is the launch command
    assert report["cwd"] == layout.JOB_DIR
    assert report["PYTHONPATH"] == f"{layout.PYTHONPATH}:/base/lib"  # the base's PYTHONPATH kept after ours
    assert report["PYTHONUNBUFFERED"] == "1"
    assert report["PATH"] == f"{layout.DEPS_DIR}/bin:/usr/local/bin:/bin"
    assert report["BASE_MARKER"] == "from-base"  # the rest of the base's environment survives
    assert report["module_file"] == f"{layout.LIB_DIR}/vdk/plugin/ml_training/runtime/bootstrap.py"
    assert report["entrypoint_file"] == f"{layout.JOB_DIR}/train.py"
    assert f"package={layout.DEPS_DIR}/tinydep/__init__.py" in run.stdout
    script = podman(
        podman_root, "run", "--rm", *RUN_OPTIONS, image.reference, "head", "-1", f"{layout.DEPS_DIR}/bin/tiny"
    )
    assert script.stdout.strip() == "#!/usr/bin/env python"

    inspect = json.loads(podman(podman_root, "image", "inspect", image.reference).stdout)[0]
    labels = inspect["Config"]["Labels"]
    assert labels["io.vdk.ml-training.job"] == "run-job"
    assert labels["io.vdk.ml-training.spec-sha256"] == load_job_spec(job).fingerprint()
    assert labels["org.opencontainers.image.base.digest"] == image.base_reference.rpartition("@")[2]
    assert labels["org.opencontainers.image.created"] == "1970-01-01T00:00:01Z"


def test_registry_errors_and_dropped_connections_are_retried(tmp_path, registry, base_image):
    proxy = FaultProxy(registry.port)
    try:
        proxy.faults = [
            Fault("GET", r"/manifests/", "500"),
            Fault("HEAD", r"/blobs/", "drop"),
            Fault("POST", r"/blobs/uploads/$", "500"),
            Fault("PUT", r"/blobs/uploads/", "drop"),
            Fault("PUT", r"/blobs/uploads/", "500"),
            Fault("PUT", r"/manifests/", "drop"),
            Fault("HEAD", r"/manifests/", "500"),
        ]
        base_via_proxy = base_image.replace(registry.host, proxy.host)
        job = image_job(tmp_path / "flaky-job", base_via_proxy)
        image = build(job, proxy.host, retry=FAST_RETRY)
        assert [f.hits for f in proxy.faults] == [f.times for f in proxy.faults]
        _, digest = get_manifest(registry, "ml/flaky-job", image.digest)
        assert digest == image.digest
        assert any("mount=" in path and status == 201 for method, path, status in proxy.log if method == "POST")

        # A registry that keeps failing: a clear error, and no tag left behind.
        proxy.faults = [Fault("PUT", r"/manifests/", "500", times=100)]
        (job / "model.py").write_text("def train():\n    pass\n")
        with pytest.raises(RegistryError) as caught:
            build(job, proxy.host, retry=FAST_RETRY)
        assert "kept failing to store manifest" in caught.value.problem and "4 attempts" in caught.value.problem
        planned = plan_image(load_job_spec(job), f"{proxy.host}/ml", audit.collect(job)).reference
        tag = planned.rpartition(":")[2]
        assert (
            requests.get(f"{registry.url}/v2/ml/flaky-job/manifests/{tag}", headers={"Accept": ACCEPT}).status_code
            == 404
        )
    finally:
        proxy.stop()


def test_an_unreachable_registry_is_a_clear_error(tmp_path, base_image):
    job = image_job(tmp_path / "lost-job", base_image)
    closed = f"127.0.0.1:{free_port()}"
    with pytest.raises(RegistryUnreachableError) as caught:
        build(job, closed, retry=FAST_RETRY)
    assert f"cannot reach {closed}" in caught.value.problem and "connection refused" in caught.value.problem
    assert "4 attempts" in caught.value.problem and closed in caught.value.fix


@pytest.fixture(scope="module")
def other_registry(tmp_path_factory):
    server = Registry(tmp_path_factory.mktemp("other-registry"))
    yield server
    server.stop()


def test_a_base_in_another_registry_is_streamed_across_and_a_dropped_stream_retried(
    tmp_path, registry, base_image, other_registry
):
    proxy = FaultProxy(registry.port)
    try:
        proxy.faults = [Fault("GET", r"/blobs/sha256:", "drop-body")]
        job = image_job(tmp_path / "copy-job", base_image.replace(registry.host, proxy.host))
        image = build(job, other_registry.host, retry=FAST_RETRY)
        assert proxy.faults[0].hits == 1
        base_layers = [layer for layer in image.layers if layer.name == "base"]
        assert [layer.action for layer in base_layers] == ["copied"]
        copied = get_blob(other_registry, "ml/copy-job", base_layers[0].digest)
        original_manifest, _ = get_manifest(registry, "base/busybox", "1")
        assert copied == get_blob(registry, "base/busybox", original_manifest["layers"][0]["digest"])
        again = build(job, other_registry.host, retry=FAST_RETRY)
        assert again.digest == image.digest and {layer.action for layer in again.layers} == {"present"}
    finally:
        proxy.stop()


def trust(auth_registry, tmp_path):
    """The registry's CA where podman looks for it: $XDG_CONFIG_HOME/containers/certs.d/<host>/ca.crt."""
    certs = tmp_path / "xdg-config" / "containers" / "certs.d" / auth_registry.host
    certs.mkdir(parents=True)
    shutil.copy(auth_registry.tls[0], certs / "ca.crt")


def docker_login(tmp_path, host, user, password):
    config = tmp_path / "docker-config" / "config.json"
    config.parent.mkdir(parents=True, exist_ok=True)
    config.write_text(json.dumps({"auths": {host: {"auth": base64.b64encode(f"{user}:{password}".encode()).decode()}}}))


def test_credentials_missing_wrong_and_right(tmp_path, base_image, auth_registry, monkeypatch):
    trust(auth_registry, tmp_path)
    job = image_job(tmp_path / "private-job", base_image)

    with pytest.raises(RegistryAuthError) as missing:
        build(job, auth_registry.host, retry=FAST_RETRY)
    assert "requires credentials and none were found" in missing.value.problem
    assert f"podman login {auth_registry.host}" in missing.value.fix

    docker_login(tmp_path, auth_registry.host, "ada", "Tr0ub4dor-guess")
    with pytest.raises(RegistryAuthError) as wrong:
        build(job, auth_registry.host, retry=FAST_RETRY)
    assert "were rejected" in wrong.value.problem and "config.json" in wrong.value.problem
    assert "Tr0ub4dor" not in str(wrong.value)  # never echo a secret

    # Right credentials through a credential helper, as with `credHelpers` in ~/.docker/config.json.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    helper = bin_dir / "docker-credential-test"
    helper.write_text(
        "#!/bin/sh\nread server\n"
        'echo "{\\"ServerURL\\": \\"$server\\", \\"Username\\": \\"ada\\", \\"Secret\\": \\"correct-horse\\"}"\n'
    )
    helper.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    (tmp_path / "docker-config" / "config.json").write_text(json.dumps({"credHelpers": {auth_registry.host: "test"}}))
    image = build(job, auth_registry.host, retry=FAST_RETRY)
    _, digest = get_manifest(auth_registry, "ml/private-job", image.digest, auth=("ada", "correct-horse"))
    assert digest == image.digest


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


def test_bearer_tokens_with_scopes_and_cross_repository_mounts(tmp_path, base_image, token_registry):
    trust(token_registry, tmp_path)
    job = image_job(tmp_path / "token-job", base_image)
    with pytest.raises(RegistryAuthError, match="none were found"):
        build(job, token_registry.host, retry=FAST_RETRY)
    docker_login(tmp_path, token_registry.host, "ada", "Tr0ub4dor-guess")
    with pytest.raises(RegistryAuthError, match="were rejected"):
        build(job, token_registry.host, retry=FAST_RETRY)

    docker_login(tmp_path, token_registry.host, "ada", "correct-horse")
    first = build(job, token_registry.host, retry=FAST_RETRY)
    assert {layer.action for layer in first.layers} == {"copied", "uploaded"}
    assert any(
        user == "ada" and "repository:ml/token-job:pull,push" in scopes
        for user, scopes in token_registry.tokens.requests
    )

    # A second job whose base is the first job's image, in the same (token-protected) registry:
    # its layers are mounted across repositories with a token that covers both. The second job's
    # repository has its own login (a `host/repository` key, as podman writes for robot accounts):
    # it is used there, and the registry's login for the base.
    second = image_job(tmp_path / "derived-job", first.reference)
    (tmp_path / "docker-config" / "config.json").write_text(
        json.dumps(
            {
                "auths": {
                    token_registry.host: {"auth": base64.b64encode(b"ada:correct-horse").decode()},
                    f"{token_registry.host}/ml/derived-job": {"auth": base64.b64encode(b"robot:robot-secret").decode()},
                }
            }
        )
    )
    token_registry.tokens.requests.clear()
    derived = build(second, token_registry.host, retry=FAST_RETRY)
    assert [layer.action for layer in derived.layers if layer.name == "base"] == ["mounted"] * 3
    assert any(
        "repository:ml/derived-job:pull,push" in scopes and "repository:ml/token-job:pull" in scopes
        for _, scopes in token_registry.tokens.requests
    )
    users = {user for user, scopes in token_registry.tokens.requests if any("ml/derived-job" in s for s in scopes)}
    assert users == {"robot"}
    assert ("ada", ["repository:ml/token-job:pull"]) in token_registry.tokens.requests


def test_an_untrusted_certificate_says_where_the_ca_goes(tmp_path, base_image, auth_registry):
    job = image_job(tmp_path / "tls-job", base_image)
    with pytest.raises(RegistryError) as caught:
        build(job, auth_registry.host, retry=FAST_RETRY)
    assert "trusted TLS connection" in caught.value.problem and "CERTIFICATE_VERIFY_FAILED" in caught.value.problem
    assert f"containers/certs.d/{auth_registry.host}/ca.crt" in caught.value.fix


def test_a_missing_base_and_a_base_without_linux_amd64_are_clear_errors(tmp_path, registry, base_image):
    missing = image_job(tmp_path / "missing-base-job", f"{registry.host}/base/nope:1")
    with pytest.raises(RegistryError) as caught:
        build(missing, registry.host, retry=FAST_RETRY)
    assert caught.value.problem == f"{registry.host}/base/nope:1 does not exist"

    # An index (multi-platform base) that only has an arm64 variant.
    raw = requests.get(f"{registry.url}/v2/base/busybox/manifests/1", headers={"Accept": ACCEPT})
    digest = raw.headers["Docker-Content-Digest"]
    index = json.dumps(
        {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [
                {
                    "mediaType": raw.headers["Content-Type"],
                    "digest": digest,
                    "size": len(raw.content),
                    "platform": {"os": "linux", "architecture": "arm64"},
                }
            ],
        }
    )
    requests.put(
        f"{registry.url}/v2/base/busybox/manifests/arm-only",
        data=index,
        headers={"Content-Type": "application/vnd.oci.image.index.v1+json"},
    ).raise_for_status()
    arm = image_job(tmp_path / "arm-job", f"{registry.host}/base/busybox:arm-only")
    with pytest.raises(BaseImageError, match="has no linux/amd64 variant \\(it has linux/arm64\\)"):
        build(arm, registry.host, retry=FAST_RETRY)

    # The same index with an amd64 entry: that manifest is used, and the base pinned by its digest.
    multi = json.loads(index)
    multi["manifests"].append({**multi["manifests"][0], "platform": {"os": "linux", "architecture": "amd64"}})
    requests.put(
        f"{registry.url}/v2/base/busybox/manifests/multi",
        data=json.dumps(multi),
        headers={"Content-Type": "application/vnd.oci.image.index.v1+json"},
    ).raise_for_status()
    image = build(image_job(tmp_path / "multi-job", f"{registry.host}/base/busybox:multi"), registry.host)
    assert image.base_reference == f"{registry.host}/base/busybox@{digest}"


def test_a_docker_schema2_base_gives_a_docker_schema2_image(tmp_path, registry, podman_root):
    tarball = build_rootfs(tmp_path / "rootfs")
    base = push_base(podman_root, tarball, f"{registry.host}/base/busybox-docker:1", format="v2s2")
    image = build(image_job(tmp_path / "docker-job", base), registry.host)
    manifest, _ = get_manifest(registry, "ml/docker-job", image.digest)
    assert manifest["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json"
    assert manifest["config"]["mediaType"] == "application/vnd.docker.container.image.v1+json"
    assert {layer["mediaType"] for layer in manifest["layers"]} == {"application/vnd.docker.image.rootfs.diff.tar.gzip"}
    podman(podman_root, "pull", "--tls-verify=false", image.reference)
    run = podman(podman_root, "run", "--rm", *RUN_OPTIONS, image.reference)
    assert f"entrypoint_file={layout.JOB_DIR}/train.py" in run.stdout


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


def test_an_image_on_a_base_without_python_runs_its_command_and_every_backends_command(
    tmp_path, registry, local_bases, podman_root
):
    """Debian's CPython has `python3` and no `python`: the image and the manifests must start that."""
    wheelhouse = tmp_path / "wheels"
    make_wheel(
        wheelhouse,
        "torch",
        "2.13.0",
        console_script="torchrun",
        files={"torch/distributed/__init__.py": b"", "torch/distributed/run.py": TORCHRUN_STAND_IN.encode()},
    )
    job = tmp_path / "debian-job"
    job.mkdir()
    (job / "config.ini").write_text(
        f"[job]\ntype = ml-training\n[ml-training]\nbase_image = {local_bases.debian}\n"
        "nodes = 2\nprocs_per_node = 2\ngpus_per_node = 0\nbackend = job\nargs = --epochs 1\n"
    )
    (job / "train.py").write_text(TRAIN_REPORT)
    (job / "requirements.txt").write_text(f"--no-index\n--find-links {wheelhouse}\ntorch==2.13.0\n")
    spec = load_job_spec(job)
    image = build(job, registry.host)
    assert image.python == "python3" and image.to_dict()["python"] == "python3"

    done = run_image(podman_root, image.reference)  # the image's own command
    assert done.returncode == 0, done.stdout + done.stderr
    assert "interpreter=/usr/bin/python3 python=3.11" in done.stdout
    assert f"torch_from={layout.DEPS_DIR}/torch/__init__.py cwd={layout.JOB_DIR} args=['--epochs', '1']" in done.stdout
    # Each backend's pod: its command, environment and working directory, executed in the image.
    container_id = podman(
        podman_root, "run", "-d", *RUN_OPTIONS, "--entrypoint", "sleep", image.reference, "600"
    ).stdout.strip()
    try:
        script = podman(podman_root, "exec", container_id, f"{layout.DEPS_DIR}/bin/torchrun", check=False)
        assert (script.returncode, script.stdout.strip()) == (0, "hello")  # console scripts start python3 too
        run = RunInfo.create(spec, audit.collect(job))
        for backend in ("pytorchjob", "trainjob", "job"):
            container = _training_container(render_run(spec, image.job_image, run, "ml", backend)[0])
            assert container["command"][0] == "python3", backend
            env = [arg for e in container["env"] if "value" in e for arg in ("-e", f"{e['name']}={e['value']}")]
            workdir = container.get("workingDir", layout.JOB_DIR)  # a TrainJob keeps the image's
            pod = podman(podman_root, "exec", "-w", workdir, *env, container_id, *container["command"], check=False)
            assert pod.returncode == 0, f"{backend}: {pod.stdout}{pod.stderr}"
            assert "launcher flags: --rdzv-conf=timeout=1800" in pod.stdout, backend
            assert "interpreter=/usr/bin/python3 python=3.11" in pod.stdout, backend
    finally:
        podman(podman_root, "rm", "-f", "-t", "0", container_id, check=False)
