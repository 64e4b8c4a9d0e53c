"""`vdk run --container`: the smoke run inside the job's image, the one `vdk deploy` pushes, loaded into
podman without a registry. What it catches that the smoke run on this machine cannot: a module the
code imports that the image lacks (installed here, missing from requirements.txt)."""

from __future__ import annotations

import pytest
from tests.support.e2e import TORCH_REQUIREMENT
from tests.support.e2e import build_only
from tests.support.e2e import vdk
from tests.support.e2e import vdk_environment
from tests.support.jobs import write_job

pytestmark = pytest.mark.slow

# A training loop that needs PyYAML (installed where vdk runs: transformers requires it).
TRAIN_WITH_YAML = """import torch
import yaml

if __name__ == "__main__":
    settings = yaml.safe_load("lr: 0.1\\nsteps: 3\\n")
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=settings["lr"])
    for _ in range(settings["steps"]):
        optimizer.zero_grad()
        model(torch.randn(8, 4)).pow(2).mean().backward()
        optimizer.step()
"""


@pytest.fixture(scope="module")
def env(registry, local_bases, podman_root, tmp_path_factory):
    environment = vdk_environment(registry.host, podman_root, tmp_path_factory.mktemp("container-env"))
    del environment["VDK_ML_TRAINING_REGISTRY"]  # a container run needs none
    return environment


def test_a_module_missing_from_requirements_fails_in_the_image_and_passes_once_listed(
    local_bases, registry, env, tmp_path
):
    job = write_job(
        tmp_path,
        "needs-yaml",
        ml={"base_image": local_bases.debian, "gpus_per_node": "0", "smoke_steps": "2"},
        files={"train.py": TRAIN_WITH_YAML, "requirements.txt": f"{TORCH_REQUIREMENT}\n"},
    )
    here = vdk("run", str(job), env=env, timeout=300)
    assert here.returncode == 0, here.stdout + here.stderr  # this machine has PyYAML: the smoke run passes

    missing = vdk("run", "--container", str(job), env=env)
    output = missing.stdout + missing.stderr
    assert missing.returncode != 0, output
    assert "smoke run FAILED" in output and "No module named 'yaml'" in output, output
    assert f"add PyYAML to {job / 'requirements.txt'}: it provides `yaml` where vdk runs" in output, output

    (job / "requirements.txt").write_text(f"{TORCH_REQUIREMENT}\npyyaml\n")
    listed = vdk("run", str(job), env={**env, "VDK_ML_TRAINING_RUN_MODE": "container"})
    output = listed.stdout + listed.stderr
    assert listed.returncode == 0, output
    assert "smoke run PASSED" in output and "rank 0: 2 steps" in output, output
    # the very image deploy pushes: same digest
    pushed = build_only(job, {**env, "VDK_ML_TRAINING_REGISTRY": f"{registry.host}/e2e"}, "--skip-smoke")
    tag = pushed["tag_reference"].rsplit(":", 1)[1]
    assert f"in the job's image localhost/vdk-ml-training/needs-yaml:{tag} " in output, output
    assert f"({pushed['digest']}: the image `vdk deploy` pushes)" in output, output
