"""What `vdk deploy` says when something is wrong names the real problem (issue 12): the real vdk CLI."""

from __future__ import annotations

import pytest

from tests.support.jobs import write_job
from tests.support.vdk_cli import vdk

pytestmark = pytest.mark.usefixtures("isolated_environment")

BROKEN = """\
import torch

if __name__ == "__main__":
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = model(torch.randn(8, 4)).pow(2).mean()
    loss.backward()
    raise ValueError("typo in the training loop")
"""


def test_a_bad_name_given_with_n_is_fixed_with_n(tmp_path):
    job = write_job(tmp_path, "good-name", ml="base_image = python:3.11\n")
    result = vdk("deploy", "-p", str(job), "-n", "Bad_Name", "--dry-run")
    assert result.exit_code == 1 and result.stdout == ""
    assert "-n Bad_Name: the job name 'Bad_Name' cannot be a Kubernetes name" in result.stderr
    assert "Fix: use `-n bad-name`" in result.stderr
    assert "rename the job directory" not in result.stderr


def test_a_failed_smoke_check_says_to_deploy_again_once(tmp_path, registry, base_image, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = write_job(
        tmp_path,
        "broken-job",
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\ngpus_per_node = 0\n",
        files={"train.py": BROKEN},
    )
    result = vdk("deploy", "-p", str(job), "--build-only")
    assert result.exit_code == 1
    assert "typo in the training loop" in result.stderr and "Nothing was built or deployed." in result.stderr
    fix = result.stderr.split("Fix: ", 1)[1]
    assert fix.strip().endswith(
        f"then deploy again (`vdk deploy -p {job}`; --skip-smoke if the smoke check itself is wrong)"
    )
    assert "vdk run" not in fix and "again Then" not in fix
