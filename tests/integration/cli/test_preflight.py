"""A job meant as ml-training whose config.ini is broken or misnamed gets one clear message from the
real `vdk` CLI — not vdk-core's traceback, and not a "successful" data-job run that ran nothing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.jobs import write_job

VDK = Path(sys.executable).parent / "vdk"
SCRIPT = 'import sys\n\nif __name__ == "__main__":\n    sys.exit(3)\n'


def vdk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    return subprocess.run([str(VDK), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def job(tmp_path: Path, config: str) -> Path:
    return write_job(tmp_path, config=config, files={"train.py": SCRIPT})


@pytest.mark.parametrize(
    "config, message, fix",
    [
        (
            "[job]\ntype = ml-training\n[ml-training]\nnodes = 1\nnodes = 2\n",
            "already exists",
            "keep one `nodes = ...` line",
        ),
        (
            "[job]\ntype = ml-training\n[ml-training]\nthis is not ini\n",
            "line 4: 'this is not ini'",
            "write every line as `key = value`",
        ),
        ("[job]\ntype = ml_training\n", "'ml_training' is not a job type", "did you mean `type = ml-training`?"),
        ("[owner]\nteam = t\n[ml-training]\nnodes = 2\n", "would run it as a data job", "add `type = ml-training`"),
    ],
)
def test_vdk_run_of_a_broken_ml_job_is_one_clear_message(tmp_path, config, message, fix):
    path = job(tmp_path, config)
    done = vdk("run", path.name, cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stdout + done.stderr
    assert message in done.stderr and f"Fix: {fix}" in done.stderr
    assert "my-job/config.ini" in done.stderr


def test_deploy_dry_run_of_an_unreadable_ml_config_names_the_syntax_error(tmp_path):
    path = job(tmp_path, "[job]\ntype = ml-training\n[ml-training]\ncpu = 8\ncpu = 4\n")
    done = vdk("deploy", "-p", str(path), "--dry-run", cwd=tmp_path)
    assert done.returncode == 1
    assert "is not an ml-training job" not in done.stderr
    assert "keep one `cpu = ...` line in [ml-training]" in done.stderr
    assert done.stdout.strip() == ""


def test_data_jobs_still_run_under_vdk(tmp_path):
    path = tmp_path / "data-job"
    path.mkdir()
    (path / "config.ini").write_text("[owner]\nteam = t\n")
    (path / "10_step.py").write_text("def run(job_input):\n    print('data step ran')\n")
    done = vdk("run", "data-job", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "data step ran" in done.stdout + done.stderr


def test_a_binary_config_ini_is_named_as_such_by_run_and_deploy(tmp_path):
    path = write_job(tmp_path, files={"train.py": SCRIPT}, config="")
    (path / "config.ini").write_bytes(b"\x00\x01\xff\xfe[job]\x00type = ml-training\n")
    for args in (["run", path.name], ["deploy", "-p", str(path), "--dry-run"]):
        done = vdk(*args, cwd=tmp_path)
        assert done.returncode in (1, 2), done.stdout + done.stderr
        assert "Traceback" not in done.stdout + done.stderr and "TypeError" not in done.stderr
        assert "is not an ml-training job" not in done.stderr
        assert "config.ini: is not a text file (it holds binary data" in done.stderr
        assert "Fix: write config.ini as UTF-8 text" in done.stderr
