"""A wrapped command's prompts (the Control Service's `-t` "Job Team", delete's confirmation) are
asked of data jobs only: ML invocations are never prompted, data jobs exactly as before."""

import click
import pytest
from click.testing import CliRunner

from vdk.plugin.ml_training.cli import verbs


def data_job_delete() -> click.Command:
    """Shaped like vdk-control-cli's `delete`: required + prompted name and team, a confirmation."""

    @click.command("delete")
    @click.option("-n", "--name", required=True, prompt="Job Name")
    @click.option("-t", "--team", required=True, prompt="Job Team")
    @click.confirmation_option(prompt="Are you sure you want to delete the data job?")
    def delete(name, team):
        click.echo(f"data job {name} of {team} deleted")

    return delete


@pytest.fixture
def root():
    group = click.Group("vdk")
    group.add_command(data_job_delete())
    calls = []
    verb = verbs.Verb(
        name="delete",
        help="",
        params=[click.Option(["-n", "--name"]), click.Option(["-t", "--team"]), click.Option(["--yes"], is_flag=True)],
        ml_only=(),
        is_ml=lambda kwargs: (kwargs.get("name") or "").startswith("ml-"),
        run_ml=lambda **kwargs: calls.append(kwargs),
    )
    verbs.install(group, verb)
    verbs.install(group, verb)  # idempotent
    return group, calls


def test_ml_invocations_are_not_prompted(root):
    group, calls = root
    result = CliRunner().invoke(group, ["delete", "-n", "ml-job"], input="")
    assert result.exit_code == 0, result.output
    assert calls == [{"name": "ml-job", "team": None, "yes": False}]
    assert "Job Team" not in result.output and "Are you sure" not in result.output
    CliRunner().invoke(group, ["delete", "-n", "ml-job", "-t", "a", "--yes"])
    assert calls[-1] == {"name": "ml-job", "team": "a", "yes": True}


@pytest.mark.parametrize(
    "args, answers, exit_code, output",
    [
        (
            ["-n", "data"],
            "team-x\ny\n",
            0,
            "Job Team: team-x\nAre you sure you want to delete the data job? [y/N]: y\n"
            "data job data of team-x deleted\n",
        ),
        (
            ["-n", "data"],
            "team-x\nn\n",
            1,
            "Job Team: team-x\nAre you sure you want to delete the data job? [y/N]: n\nAborted!\n",
        ),
        (["-n", "data", "-t", "a", "--yes"], "", 0, "data job data of a deleted\n"),
        (
            [],
            "data\nteam-y\ny\n",
            0,
            "Job Name: data\nJob Team: team-y\nAre you sure you want to delete the data job? [y/N]: y\n"
            "data job data of team-y deleted\n",
        ),
    ],
)
def test_data_jobs_are_prompted_as_by_the_original(root, args, answers, exit_code, output):
    group, calls = root
    wrapped = CliRunner().invoke(group, ["delete", *args], input=answers)
    original = CliRunner().invoke(data_job_delete(), args, input=answers)
    assert (wrapped.exit_code, wrapped.output) == (original.exit_code, original.output) == (exit_code, output)
    assert calls == []
