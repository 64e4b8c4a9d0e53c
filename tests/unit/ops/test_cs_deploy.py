"""What a deploy through the Control Service takes from the job (ops/cs_deploy.py): a name and a team the service
can take, no sweep (not through it yet), and VDK's own keys of config.ini, `[job] schedule_cron` and [contacts],
sent as `vdk deploy` of a data job sends them."""

from __future__ import annotations

import dataclasses

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.ops.cs_deploy import _schedule_and_contacts
from vdk.plugin.ml_training.ops.cs_deploy import check_for_service

SWEEP = "\n[ml-training.sweep]\nlr = 1e-4, 1e-3\ntrials = 2\nmetric = loss\n"


def test_the_service_takes_names_of_6_to_50_characters_jobs_with_a_team_and_no_sweep(tmp_path):
    spec = load_job_spec(write_job(tmp_path, "mnist-ddp", team="vision"))
    assert check_for_service(spec) == "vision"
    with pytest.raises(MLTrainingError, match="6 to 50 characters") as short:
        check_for_service(dataclasses.replace(spec, name="mnist"))
    assert short.value.fix.startswith("deploy it under another name with -n NAME")
    with pytest.raises(MLTrainingError, match="has no team"):
        check_for_service(dataclasses.replace(spec, team=None))
    sweep = load_job_spec(write_job(tmp_path / "s", "lr-sweep", team="vision", ml="args = --lr ${lr}", extra=SWEEP))
    with pytest.raises(JobConfigError, match="a sweep is not deployed through the VDK Control Service yet"):
        check_for_service(sweep)


def test_the_schedule_and_contacts_are_vdks_own_keys_of_config_ini(tmp_path):
    config = (
        "[owner]\nteam = vision\n\n[job]\ntype = ml-training\nschedule_cron = 0 3 * * *\n\n[ml-training]\n\n"
        "[contacts]\nnotified_on_job_failure_user_error = ada@example.com, bo@example.com\n"
    )
    spec = load_job_spec(write_job(tmp_path, "mnist-ddp", config=config))
    schedule, contacts = _schedule_and_contacts(spec)
    assert schedule == "0 3 * * *"
    assert contacts == {
        "notified_on_job_failure_user_error": ["ada@example.com", "bo@example.com"],
        "notified_on_job_failure_platform_error": [],
        "notified_on_job_success": [],
        "notified_on_job_deploy": [],
    }
    assert _schedule_and_contacts(load_job_spec(write_job(tmp_path / "b", "other-job"))) == (None, None)
