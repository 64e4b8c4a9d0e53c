"""A job meant as ml-training whose config.ini is broken or misnamed gets one clear message from the
real `vdk` CLI — not vdk-core's traceback, and not a "successful" data-job run that ran nothing."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.cli.preflight import run_job_dir

VDK = Path(sys.executable).parent / "vdk"
SCRIPT = 'import sys\n\nif __name__ == "__main__":\n    sys.exit(3)\n'


def vdk(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
    return subprocess.run([str(VDK), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def job(tmp_path: Path, config: str) -> Path:
    return write_job(tmp_path, config=config, files={"train.py": SCRIPT})


@pytest.mark.parametrize(
    "args, expected",
    [
        (["run", "job"], "job"),
        (["-v", "DEBUG", "run", "--full", "job"], "job"),
        (["run", "--arguments", "{}", "job"], "job"),
        (["deploy", "-p", "job"], None),
        (["run"], None),
    ],
)
def test_the_job_dir_of_a_run_command_line(args, expected):
    assert run_job_dir(args) == (Path(expected) if expected else None)
