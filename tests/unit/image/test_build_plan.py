"""The dry run: what the image would hold, worked out from local files alone and contacting nothing: its
layers, exclusions, warnings and reference; the same inputs give the same reference and any change a
new one; a name that cannot be an image name and a broken install are clear errors. (In a real git
checkout: tests/integration/image/test_build_plan_git.py.)"""

from __future__ import annotations

import shutil

import pytest

from tests.support.base_image import image_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.image import plan_image
from vdk.plugin.ml_training.image import runtime_layer
from vdk.plugin.ml_training.image.build_errors import ImageBuildError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source import audit
from vdk.plugin.ml_training.source.job_files import LARGE_FILE_BYTES

BASE = "registry.example.com/ml/base:1"
# The base described in [ml-training], so that a plan reads nothing of it (see test_image_inspection.py).
DESCRIBED = "base_python = python\n"


def provenance(job, commit="0" * 40, remote="https://git.example.com/ml/jobs.git", dirty=False):
    return audit.Provenance(
        commit, dirty, "f" * 64 if dirty else None, remote, "ada@example.com", "2026-01-01T00:00:00Z"
    )


def test_plan_reports_layers_exclusions_warnings_and_reference_without_contacting_anything(tmp_path, no_network):
    job = image_job(tmp_path / "train-job", BASE, DESCRIBED)
    (job / "requirements.txt").write_text("transformers>=5\n# comment\ndatasets\n")
    with open(job / "weights.bin", "wb") as f:
        f.truncate(LARGE_FILE_BYTES + 10)
    spec = load_job_spec(job)

    plan = plan_image(spec, "registry.example.com/ml", provenance(job))

    assert plan.reference.startswith("registry.example.com/ml/train-job:")
    assert [layer.name for layer in plan.layers] == ["dependencies", "runtime", "code"]
    code = plan.layers[-1]
    assert code.directory == "/opt/vdk-ml/job" and code.files == 9
    assert plan.requirements == ("transformers>=5", "datasets")
    excluded = {e.path: e.reason for e in plan.excluded}
    assert excluded == {
        ".env": "environment file (may hold secrets)",
        "__pycache__/": "Python bytecode cache",
        "data/": ".gitignore: data/",
        "train.log": ".gitignore: *.log",
    }
    assert plan.command == (
        "python",
        "-m",
        "vdk.plugin.ml_training.runtime.torchrun_launch",
        "-m",
        "vdk.plugin.ml_training.runtime.bootstrap",
        "train.py",
        "--epochs",
        "2",
    )
    assert plan.env["PYTHONPATH"] == "/opt/vdk-ml/deps:/opt/vdk-ml/lib" and plan.env["PYTHONUNBUFFERED"] == "1"
    assert plan.labels["org.opencontainers.image.revision"] == "0" * 40
    assert plan.labels["io.vdk.ml-training.team"] == "ml-platform"
    assert plan.labels["io.vdk.ml-training.spec-sha256"] == spec.fingerprint()

    text = plan.render()
    assert plan.reference in text
    assert "data/  (.gitignore: data/)" in text and ".env  (environment file (may hold secrets))" in text
    assert "warning: weights.bin is 50.0 MB: files over 50.0 MB" in text  # sizes as the README states them
    assert "dependencies /opt/vdk-ml/deps" in text and "3 lines" not in text and "2 lines of requirements.txt" in text
    assert "command    python -m vdk.plugin.ml_training.runtime.torchrun_launch" in text


def test_same_inputs_same_reference_and_any_change_a_new_one(tmp_path, no_network, monkeypatch):
    job = image_job(tmp_path / "train-job", BASE, DESCRIBED)
    spec = load_job_spec(job)
    first = plan_image(spec, "registry.example.com/ml", provenance(job)).reference
    assert plan_image(spec, "registry.example.com/ml", provenance(job)).reference == first
    # The deployer and the moment of the build are not part of the image.
    other_user = audit.Provenance(
        "0" * 40, False, None, "https://git.example.com/ml/jobs.git", "bob@example.com", "2027-05-05T00:00:00Z"
    )
    assert plan_image(spec, "registry.example.com/ml", other_user).reference == first
    (job / "model.py").write_text("def train():\n    print('changed')\n")
    assert plan_image(spec, "registry.example.com/ml", provenance(job)).reference != first
    (job / "model.py").write_text("def train():\n    print('training')\n")
    assert plan_image(spec, "registry.example.com/ml", provenance(job, commit="1" * 40)).reference != first
    monkeypatch.setenv("SOURCE_DATE_EPOCH", "1700000000")
    dated = plan_image(spec, "registry.example.com/ml", provenance(job))
    assert dated.labels["org.opencontainers.image.created"] == "2023-11-14T22:13:20Z" and dated.reference != first


def test_a_name_that_cannot_be_an_image_name_and_a_broken_install_are_clear_errors(tmp_path, no_network, monkeypatch):
    job = image_job(tmp_path / "Train_Job", BASE, DESCRIBED)
    with pytest.raises(JobConfigError, match="cannot be a Kubernetes name"):
        plan_image(load_job_spec(job), "registry.example.com/ml", provenance(job))
    good = image_job(tmp_path / "train-job", BASE, DESCRIBED)
    broken = tmp_path / "installed" / "ml_training"  # a copy of the installed package, without its bootstrap
    shutil.copytree(runtime_layer.runtime_package_dir(), broken, ignore=shutil.ignore_patterns("__pycache__"))
    (broken / "runtime" / "bootstrap.py").unlink()
    monkeypatch.setattr(runtime_layer, "runtime_package_dir", lambda: broken)
    with pytest.raises(ImageBuildError, match="runtime package is incomplete"):
        plan_image(load_job_spec(good), "registry.example.com/ml", provenance(good))
