"""A module a local run could not import: the distribution to list in requirements.txt (the image and the run's
overlay install it), or, in an environment its user manages, to install there too."""

import dataclasses

from tests.support.local_outcomes import make_run
from tests.support.local_outcomes import missing_module
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.ops.plan_runner import failure_fix


def managed(run):
    """The run of a job with `requirements_overlay = false`: vdk's environment is managed by its user."""
    spec = dataclasses.replace(run.plan.spec, requirements_overlay=False)
    return dataclasses.replace(run, plan=dataclasses.replace(run.plan, spec=spec))


def test_a_missing_module_goes_into_requirements_txt_never_into_vdk_s_environment(tmp_path):
    run = make_run(tmp_path, {0: missing_module("sentencepiece.tokenizer"), 1: {"status": "stopped", "steps": 2}})
    requirements = run.plan.spec.job_dir / "requirements.txt"
    fix = failure_fix(analyse(run))
    assert f"add sentencepiece (which provides `sentencepiece`) to {requirements}" in fix
    assert "`vdk run` into the run's overlay (vdk's own environment stays as it is)" in fix
    assert "pip install" not in fix
    # the import name is not the distribution's
    fix = failure_fix(analyse(make_run(tmp_path / "yaml", {0: missing_module("yaml"), 1: {"status": "stopped"}})))
    assert "add PyYAML (which provides `yaml`)" in fix and "pip install" not in fix
    error = {
        "type": "ImportError",
        "message": "ImportError: cannot import name 'Llama4' from 'transformers'",
        "traceback": "Traceback ...\n",
    }
    run = make_run(tmp_path / "b", {0: {"status": "failed", "ended_at": 1.0, "error": error}, 1: {"status": "stopped"}})
    fix = failure_fix(analyse(run))
    assert "installed version of a package lacks what the code imports: pin the version" in fix
    assert "pip install" not in fix


def test_a_listed_module_the_overlay_lacks_names_the_line_to_check(tmp_path):
    run = make_run(tmp_path, {0: missing_module("cv2"), 1: {"status": "stopped", "steps": 2}})
    requirements = run.plan.spec.job_dir / "requirements.txt"
    requirements.write_text("numpy\nopencv-python-headless==4.10.0.84 ; python_version < '3.8'\n")
    fix = failure_fix(analyse(run))
    assert f"opencv-python-headless is in {requirements}, but what uv installed from it" in fix
    assert "for this Python has no `cv2`" in fix
    assert "pip install" not in fix


def test_with_a_managed_environment_a_missing_module_is_installed_there_and_listed(tmp_path):
    run = managed(make_run(tmp_path, {0: missing_module("sentencepiece.tokenizer"), 1: {"status": "stopped"}}))
    fix = failure_fix(analyse(run))
    assert "install sentencepiece (which provides `sentencepiece`)" in fix and "-m pip install sentencepiece`" in fix
    assert "`requirements_overlay = false` in [ml-training]: you manage the environment vdk runs in" in fix
    assert f"list it in {run.plan.spec.job_dir / 'requirements.txt'}" in fix and "dependency layer" in fix


def test_with_a_managed_environment_a_listed_module_is_installed_from_requirements_txt(tmp_path):
    run = managed(make_run(tmp_path, {0: missing_module("cv2"), 1: {"status": "stopped", "steps": 2}}))
    requirements = run.plan.spec.job_dir / "requirements.txt"
    requirements.write_text("numpy\nopencv-python-headless==4.10.0.84  # the server build\n")
    fix = failure_fix(analyse(run))
    assert f"opencv-python-headless (which provides `cv2`) is in {requirements} but not installed" in fix
    assert f"pip install -r {requirements}`" in fix and "list it" not in fix
