"""`vdk deploy` takes its job as `vdk run JOB` and `vdk show` do: `vdk deploy JOB`, `vdk deploy -p JOB`, and
`vdk deploy` inside the job's directory, with and without the Control Service CLI (whose deploy it wraps: there the
positional form failed with a message about the Control Service and pydantic). A data job keeps its own command;
a directory that is no job is told the three forms."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.support.vdk_cli import vdk

pytestmark = pytest.mark.usefixtures("isolated_environment")

DDP_EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "ddp-nccl"
DRY_RUN = ("--dry-run", "--backend", "job")


def kinds(result) -> list[str]:
    assert result.exit_code == 0, result.output
    return [m["kind"] for m in yaml.safe_load_all(result.stdout)]


def forms(monkeypatch, control_cli: bool) -> None:
    positional = vdk("deploy", str(DDP_EXAMPLE), *DRY_RUN, control_cli=control_cli)
    assert kinds(positional) == ["Job", "Service", "ConfigMap"]
    option = vdk("deploy", "-p", str(DDP_EXAMPLE), *DRY_RUN, control_cli=control_cli)
    assert kinds(option) == kinds(positional)
    monkeypatch.chdir(DDP_EXAMPLE)
    here = vdk("deploy", *DRY_RUN, control_cli=control_cli)
    assert kinds(here) == kinds(positional)
    assert "ddp-nccl" in here.stdout


def test_the_job_as_an_argument_an_option_or_the_directory_it_runs_in(monkeypatch, tmp_path):
    forms(monkeypatch, control_cli=False)
    monkeypatch.chdir(tmp_path)  # no job here, none given
    nothing = vdk("deploy", *DRY_RUN)
    assert nothing.exit_code == 2
    assert "Missing the job to deploy: `vdk deploy JOB` (its directory, or -p JOB), or `vdk deploy` inside" in (
        nothing.output
    )
    twice = vdk("deploy", "-p", str(DDP_EXAMPLE), str(tmp_path), *DRY_RUN)
    assert twice.exit_code == 2 and "the job is given twice" in twice.output


@pytest.mark.needs_control_cli
def test_the_three_forms_through_the_control_service_cli_s_deploy(monkeypatch, tmp_path):
    forms(monkeypatch, control_cli=True)
    data_job = tmp_path / "data-job"
    data_job.mkdir()
    (data_job / "config.ini").write_text("[owner]\nteam = t\n")
    positional = vdk("deploy", str(data_job), "-n", "d", "-r", "x", control_cli=True)
    assert positional.exit_code == 2
    assert "[JOB] applies to ml-training jobs only (a data job's directory is given with -p)" in positional.output
    monkeypatch.chdir(DDP_EXAMPLE)  # in an ml-training job's directory, an operation on a deployed data job
    shown = vdk("deploy", "--show", "-n", "data-job", "-t", "t", control_cli=True)
    assert "Cannot connect to the Control Service" in shown.output  # the Control Service's own command answered
