"""`vdk run` of an ml-training job, as a user runs it (a new process with vdk's own logging): VDK's banner, its
`Run job with directory` and its timestamped step results (about a dozen lines) no longer wrap the run's summary;
the error they carried is said once as the other verbs say it. `vdk -v INFO` keeps VDK's lines, and a data job
keeps them whatever is asked."""

from __future__ import annotations

import pytest

from tests.support.jobs import write_job
from tests.support.vdk_cli import vdk_process

pytestmark = pytest.mark.usefixtures("isolated_environment")

VDK_LINES = (
    "Versatile Data Kit (VDK)",
    "Build details:",
    "Installed plugins:",
    "Run job with directory",
    "Step results:",
)
TYPO = "\n[ml-training.sweep]\nlr = 0.1, 0.01\nmetrc = loss\n"


def test_an_ml_training_run_says_its_error_once_without_vdk_s_banner(tmp_path):
    job = write_job(tmp_path, "typo", ml={"args": "--lr ${lr}", "gpus_per_node": "0"}, extra=TYPO)
    done = vdk_process("run", str(job))
    assert done.returncode == 1
    assert not [line for line in VDK_LINES if line in done.stderr], done.stderr
    assert done.stderr.startswith(f"Error: {job / 'config.ini'} [ml-training.sweep] metrc: 'metrc' is not a setting")
    assert done.stderr.count("did you mean `metric = loss`?") == 1 and done.stdout == ""

    verbose = vdk_process("-v", "INFO", "run", str(job))  # asked for: VDK's lines as before, the error in them
    assert verbose.returncode == 1
    assert all(line in verbose.stderr for line in VDK_LINES), verbose.stderr
    assert "JobConfigError:" in verbose.stderr and "Error: " not in verbose.stderr.replace("JobConfigError: ", "")


def test_a_data_job_keeps_vdk_s_lines(tmp_path):
    data_job = tmp_path / "data-job"
    data_job.mkdir()
    (data_job / "config.ini").write_text("[owner]\nteam = t\n")
    (data_job / "10_step.py").write_text("def run(job_input):\n    print('data step ran')\n")
    done = vdk_process("run", str(data_job))
    assert done.returncode == 0, done.stderr
    assert "Versatile Data Kit (VDK)" in done.stderr and "Step results:" in done.stderr
