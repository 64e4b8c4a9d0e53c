"""`run_job` of ops/local_run.py is `vdk run` for every kind of job: a job with a sweep gets its smoke check or its
trials (tests/integration/ops/test_sweep_local.py runs them), and what a sweep cannot do is refused before
anything starts, as `vdk run` refuses it."""

from __future__ import annotations

import pytest

from tests.support.jobs import write_job
from tests.support.recorder import Recorder
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.ops.local_run import run_job

pytestmark = pytest.mark.usefixtures("isolated_environment")


def _sweep_job(tmp_path):
    return load_job_spec(
        write_job(
            tmp_path,
            "lr-local",
            ml={"args": "--lr ${lr}", "gpus_per_node": "0"},
            extra="\n[ml-training.sweep]\nlr = 1e-4, 1e-2\nmetric = val_score\n",
        )
    )


@pytest.mark.parametrize("how", [{"container": True}, {"mode": "container"}])
def test_a_sweep_in_the_job_s_image_is_refused_before_anything_starts(tmp_path, monkeypatch, how):
    if "mode" in how:
        monkeypatch.setenv("VDK_ML_TRAINING_RUN_MODE", how.pop("mode"))  # as ml_training_run_mode says it
    told = Recorder()
    with pytest.raises(MLTrainingError, match="a sweep's smoke check runs on this machine") as raised:
        run_job(_sweep_job(tmp_path), reporter=told, **how)
    assert "without --container" in raised.value.fix
    assert told.notes == [] and told.events == []  # nothing was checked or started
