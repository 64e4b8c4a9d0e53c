"""What one `vdk run` reads, counted (the real vdk CLI with its hooks, a real run): config.ini read and parsed
once, although vdk_start's check of a job meant as ml-training, the hook deciding the job is for ML, the
settings, the spec and the run's mode (ml_training_run_mode of [vdk]) all use it."""

from __future__ import annotations

import pytest

from tests.integration.cli.test_deploy_reads import Reads
from tests.support.jobs import write_job
from tests.support.vdk_cli import vdk

pytestmark = pytest.mark.usefixtures("isolated_environment")


def test_one_vdk_run_reads_config_ini_once_and_its_vdk_section_still_counts(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    job = write_job(
        tmp_path,
        "counted-run",
        ml="gpus_per_node = 0",
        files={"train.py": "print('trained')\n"},
        extra="\n[vdk]\nml_training_run_mode = full\n",
    )
    reads = Reads(monkeypatch)

    result = vdk("run", job.name)

    assert result.exit_code == 0, result.output
    assert "trained" in result.output
    assert "full run" in result.output.lower(), result.output  # [vdk]'s mode, read with the spec
    assert len(reads.configs) == 1, reads.configs

    reads.clear()
    (job / "config.ini").write_text((job / "config.ini").read_text().replace("= full", "= smoke"))
    again = vdk("run", job.name)  # the same process: the file changed, so it is read anew
    assert "ml-training smoke run of counted-run" in again.output, again.output  # (it takes no step: it fails)
    assert len(reads.configs) == 1
