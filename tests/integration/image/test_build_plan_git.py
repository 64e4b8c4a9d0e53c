"""The dry run of a job in a real git checkout, from local files alone: the plan labels the image with
the commit, the remote (never its credentials) and whether the tree is dirty. (The plan's layers,
reference and errors: tests/unit/image/test_build_plan.py.)"""

from __future__ import annotations

import subprocess

from tests.support.base_image import image_job
from vdk.plugin.ml_training.image import plan_image
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit

BASE = "registry.example.com/ml/base:1"
# The base described in [ml-training], so that a plan reads nothing of it (see test_image_inspection.py).
DESCRIBED = "base_python = python\n"


def test_credentials_in_a_remote_url_never_reach_a_label(tmp_path, no_network):
    job = image_job(tmp_path / "repo" / "train-job", BASE, DESCRIBED)

    def run(*args):
        subprocess.run(["git", "-C", str(tmp_path / "repo"), *args], check=True, capture_output=True)

    run("init", "-q")
    run("remote", "add", "origin", "https://ada:ghp_secret@github.com/org/repo.git")  # as CI clones write it
    run("add", ".")
    run("-c", "user.email=a@b.c", "-c", "user.name=A", "commit", "-qm", "job")
    (job / "model.py").write_text("def train():\n    print('uncommitted')\n")
    plan = plan_image(load_job_spec(job), "registry.example.com/ml", audit.collect(job))
    assert plan.labels["org.opencontainers.image.source"] == "https://github.com/org/repo.git"
    assert "ghp_secret" not in plan.render()
    assert plan.labels["io.vdk.ml-training.git-dirty"] == "true"


def test_plan_of_a_real_git_checkout(tmp_path, no_network):
    job = image_job(tmp_path / "repo" / "train-job", BASE, DESCRIBED)

    def run(*args):
        subprocess.run(["git", "-C", str(tmp_path / "repo"), *args], check=True, capture_output=True)

    run("init", "-q")
    run("-c", "user.email=a@b.c", "-c", "user.name=A", "add", ".")
    run("-c", "user.email=a@b.c", "-c", "user.name=A", "commit", "-qm", "job")
    plan = plan_image(load_job_spec(job), "registry.example.com/ml", audit.collect(job))
    assert len(plan.labels["org.opencontainers.image.revision"]) == 40
    assert ".git/" not in {e.path for e in plan.excluded}  # the repository root is above the job
