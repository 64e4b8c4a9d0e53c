"""A module a local run could not import: the distribution to install and list in requirements.txt."""

from tests.support.local_outcomes import make_run
from tests.support.local_outcomes import missing_module
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.ops.local_run import failure_fix


def test_a_missing_module_names_the_distribution_to_install_and_list_in_requirements(tmp_path):
    run = make_run(tmp_path, {0: missing_module("sentencepiece.tokenizer"), 1: {"status": "stopped", "steps": 2}})
    fix = failure_fix(analyse(run))
    assert "install sentencepiece (which provides `sentencepiece`)" in fix and "-m pip install sentencepiece`" in fix
    assert f"list it in {run.plan.spec.job_dir / 'requirements.txt'}" in fix and "dependency layer" in fix
    # the import name is not the distribution's
    fix = failure_fix(analyse(make_run(tmp_path / "yaml", {0: missing_module("yaml"), 1: {"status": "stopped"}})))
    assert "install PyYAML (which provides `yaml`)" in fix and "pip install PyYAML`" in fix
    error = {
        "type": "ImportError",
        "message": "ImportError: cannot import name 'Llama4' from 'transformers'",
        "traceback": "Traceback ...\n",
    }
    run = make_run(tmp_path / "b", {0: {"status": "failed", "ended_at": 1.0, "error": error}, 1: {"status": "stopped"}})
    assert "installed version of a package lacks what the code imports" in failure_fix(analyse(run))


def test_a_missing_module_listed_in_requirements_is_installed_from_it_not_added_again(tmp_path):
    run = make_run(tmp_path, {0: missing_module("cv2"), 1: {"status": "stopped", "steps": 2}})
    requirements = run.plan.spec.job_dir / "requirements.txt"
    requirements.write_text("numpy\nopencv-python-headless==4.10.0.84  # the server build\n")
    fix = failure_fix(analyse(run))
    assert f"opencv-python-headless (which provides `cv2`) is in {requirements} but not installed" in fix
    assert f"pip install -r {requirements}`" in fix and "list it" not in fix
