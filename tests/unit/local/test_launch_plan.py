"""The watchdog settings a local run's launch plan gives its ranks: a full run is watched for stalls with
the job's own timeouts (not the shell's), a smoke run has its own timeout and is not."""

from __future__ import annotations

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launch_plan import smoke_plan
from vdk.plugin.ml_training.runtime import watchdog
from vdk.plugin.ml_training.runtime.watchdog import WatchdogSettings


def test_full_runs_are_watched_for_stalls_and_smoke_runs_are_not(tmp_path, monkeypatch):
    monkeypatch.setenv(watchdog.STALL_TIMEOUT, "5")  # a value in the shell is not what the job says
    job = write_job(tmp_path, "watched", ml="stall_timeout = 10m\n", env="", files={"train.py": "import torch\n"})
    spec = load_job_spec(job)
    full = WatchdogSettings.from_env(full_plan(spec, gpus=0).env)
    assert (full.stall_seconds, full.startup_seconds) == (600, 3600)
    smoke = smoke_plan(spec).env  # the smoke run has its own timeout
    assert watchdog.STALL_TIMEOUT not in smoke and watchdog.STARTUP_TIMEOUT not in smoke
