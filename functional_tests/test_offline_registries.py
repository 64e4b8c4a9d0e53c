"""docs/offline-registries.md, followed as written: the walkthrough's commands, run in order, take a base from
"Docker Hub" (the Debian test base in the test registry stands for it) through a saved file into "your registry"
(the test registry under the walkthrough's names), then `vdk deploy --dry-run`, `vdk run --container` and
`vdk deploy` (to the fake API server) with only the walkthrough's settings: no job names a base."""

from __future__ import annotations

import re
import shlex
import subprocess

import pytest
import requests
from tests.support.e2e import PROJECT
from tests.support.e2e import TORCH_REQUIREMENT
from tests.support.e2e import vdk
from tests.support.e2e import vdk_environment
from tests.support.fake_apiserver import FakeKube
from tests.support.jobs import write_job
from tests.support.registry import podman_command

pytestmark = pytest.mark.slow

PAGE = PROJECT / "docs" / "offline-registries.md"
HUB_BASE = "docker.io/pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
YOUR_REGISTRY = "registry.example.com"
TRAIN = """import torch

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
"""


def walkthrough_commands() -> list[str]:
    """The shell lines of the page's walkthrough, in order."""
    text = PAGE.read_text()
    section = text[text.index("## Walkthrough") :]
    blocks = re.findall(r"```sh\n(.*?)```", section, re.S)
    return [line for block in blocks for line in block.splitlines() if line.strip()]


def test_the_page_s_walkthrough_gets_a_job_from_a_copied_base_to_a_container_run_and_a_deploy(
    registry, local_bases, podman_root, tmp_path
):
    commands = walkthrough_commands()
    assert [c.split()[0] for c in commands].count("vdk") == 3 and any(c.startswith("podman save") for c in commands)
    env = vdk_environment(registry.host, podman_root, tmp_path / "env")
    del env["VDK_ML_TRAINING_REGISTRY"]  # the walkthrough sets it
    fake = FakeKube(pytorchjob=True).start()
    try:
        env["KUBECONFIG"] = str(fake.kubeconfig(tmp_path / "kubeconfig", namespace="ml"))
        job = write_job(
            tmp_path,
            "my-job",
            ml={"gpus_per_node": "0"},  # no base_image: VDK_ML_TRAINING_BASE_IMAGE is the walkthrough's
            files={"train.py": TRAIN, "requirements.txt": f"{TORCH_REQUIREMENT}\n"},  # the Debian base has no torch
        )
        outputs = {}
        for command in commands:
            line = command.replace(HUB_BASE, local_bases.debian).replace(YOUR_REGISTRY, registry.host)
            words = shlex.split(line)
            if words[0] == "export":
                name, _, value = words[1].partition("=")
                if name != "PIP_INDEX_URL":  # this machine's own pip settings stand for your package index
                    env[name] = value
            elif words[0] == "podman":
                if words[1] == "login":
                    continue  # the test registry asks for no credentials
                if words[1] in ("pull", "push"):
                    words.insert(2, "--tls-verify=false")  # the test registry speaks plain HTTP
                argv, podman_env = podman_command(podman_root, *words[1:])
                done = subprocess.run(argv, cwd=tmp_path, env=podman_env, capture_output=True, text=True, timeout=600)
                assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
            else:
                assert words[0] == "vdk", line
                args = [str(job) if word == "my-job" else word for word in words[1:]]
                done = vdk(*args, env=env, timeout=900)
                assert done.returncode == 0, f"{line}\n{done.stdout}\n{done.stderr}"
                outputs[command] = done
    finally:
        fake.stop()

    mirrored = f"{registry.host}/base/pytorch:2.13.0-cuda13.0-cudnn9-runtime"
    assert env["VDK_ML_TRAINING_BASE_IMAGE"] == mirrored and env["VDK_ML_TRAINING_REGISTRY"] == f"{registry.host}/ml"
    tags = requests.get(f"{registry.url}/v2/base/pytorch/tags/list", timeout=10).json()["tags"]
    assert tags == ["2.13.0-cuda13.0-cudnn9-runtime"]  # the walkthrough's push put the base there

    dry = outputs["vdk deploy -p my-job --dry-run"]
    assert f"base       {mirrored}" in dry.stderr or mirrored in dry.stderr, dry.stderr
    assert "python3: `python3` on the image's PATH" in dry.stderr, dry.stderr  # read from your registry
    container = outputs["vdk run --container my-job"]
    assert "smoke run PASSED" in container.stdout + container.stderr, container.stdout + container.stderr
    deployed = outputs["vdk deploy -p my-job"]
    assert "smoke run PASSED" in deployed.stderr and "Nothing was built" not in deployed.stderr, deployed.stderr

    (pytorchjob,) = fake.stored("pytorchjobs")
    image = pytorchjob["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]["containers"][0]["image"]
    assert image.startswith(f"{registry.host}/ml/my-job@sha256:")  # the nodes pull from the job registry only
    repository, digest = image.split("/", 1)[1].split("@")
    manifest = requests.get(
        f"{registry.url}/v2/{repository}/manifests/{digest}",
        headers={"Accept": "application/vnd.oci.image.manifest.v1+json"},
        timeout=10,
    ).json()
    for layer in manifest["layers"]:  # every layer, the base's too, is in the job's repository
        answer = requests.head(f"{registry.url}/v2/{repository}/blobs/{layer['digest']}", timeout=10)
        assert answer.status_code == 200, layer
    assert fake.run_objects() == sorted(
        [f"PyTorchJob/{pytorchjob['metadata']['name']}", f"ConfigMap/{pytorchjob['metadata']['name']}-record"]
    )
