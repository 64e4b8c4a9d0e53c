"""Teams: a team's name as a label value (normalised and validated in one place), VDK's default team in
the Control Service CLI's own file, which team a command is for, and the team -> namespace / queue mappings."""

from pathlib import Path

import pytest

from tests.support.jobs import write_job
from tests.support.vdk_cli import HAS_CONTROL_CLI
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.errors import SettingError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job import teams

# --- a team's name as a label value ------------------------------------------------------------------


@pytest.mark.parametrize(
    "team, label",
    [
        ("vision", "vision"),
        ("Vision Research", "Vision-Research"),  # VDK teams are often written with blanks
        ("  nlp\t team ", "nlp-team"),
        ("ml.platform_2", "ml.platform_2"),
        ("a" * 63, "a" * 63),
    ],
)
def test_team_names_become_label_values(team, label):
    assert teams.label_problem(team) is None
    assert teams.team_label(team) == label


@pytest.mark.parametrize(
    "team, problem, suggestion",
    [
        ("R&D/Vision", "cannot be a Kubernetes label value", "R-D-Vision"),
        ("-vision-", "cannot be a Kubernetes label value", "vision"),
        ("équipe", "cannot be a Kubernetes label value", "quipe"),
        ("a" * 64, "longer than the 63 characters", "a" * 63),
    ],
)
def test_a_team_name_that_cannot_be_a_label_value_is_an_error_with_a_better_name(team, problem, suggestion):
    with pytest.raises(MLTrainingError) as error:
        teams.team_label(team)
    assert problem in error.value.problem and repr(team) in error.value.problem
    assert error.value.fix == f"use a team name such as {suggestion!r}"
    assert teams.label_problem(suggestion) is None  # the suggestion itself is valid


def test_blanks_do_not_make_another_team_but_case_does():
    assert teams.same_team("Vision Research", "Vision-Research")
    assert teams.same_team(" vision", "vision ")
    assert not teams.same_team("Vision", "vision")
    assert teams.same_team(None, None) and not teams.same_team("vision", None)


# --- VDK's default team ----------------------------------------------------------------------------------


def test_the_default_team_is_kept_where_the_control_service_cli_keeps_it(vdk_defaults_in_a_temporary_directory):
    path = vdk_defaults_in_a_temporary_directory / ".vdk.internal" / "vdk-configuration.ini"
    assert teams.defaults_path() == path
    assert teams.default_team() is None  # no file yet
    assert teams.write_default_team("Vision Research") == path
    assert path.read_text() == "[defaults]\nteam-name = Vision Research\n\n"
    assert teams.default_team() == "Vision Research"
    teams.write_default_team(None)
    assert teams.default_team() is None


def test_other_defaults_in_the_file_are_kept(vdk_defaults_in_a_temporary_directory):
    path = teams.defaults_path()
    path.parent.mkdir(parents=True)
    path.write_text("[defaults]\nrest-api-url = http://cs.example.com\n")
    teams.write_default_team("nlp")
    assert "rest-api-url = http://cs.example.com" in path.read_text()
    assert teams.default_team() == "nlp"


def test_an_unreadable_defaults_file_is_an_error_that_says_what_to_do():
    path = teams.defaults_path()
    path.parent.mkdir(parents=True)
    path.write_text("team-name = no section header\n")
    with pytest.raises(MLTrainingError) as error:
        teams.default_team()
    assert str(path) in error.value.problem and "vdk set-default -t TEAM" in error.value.fix


@pytest.mark.needs_control_cli  # `make test` runs it in .venv-cs only
@pytest.mark.skipif(not HAS_CONTROL_CLI, reason="needs vdk-plugin-control-cli (run in .venv-cs)")
def test_the_control_service_cli_and_the_plugin_share_the_default_team(vdk_defaults_in_a_temporary_directory):
    from vdk.internal.control.configuration.vdk_config import VDKConfigFolder

    folder = VDKConfigFolder(base_dir=str(vdk_defaults_in_a_temporary_directory))
    folder.write_configuration(section="defaults", option="team-name", value="written-by-vdk-control-cli")
    assert teams.default_team() == "written-by-vdk-control-cli"
    teams.write_default_team("written-by-the-plugin")
    assert folder.read_configuration(section="defaults", option="team-name") == "written-by-the-plugin"


# --- which team a command is for ----------------------------------------------------------------------------

JOB = teams.OwnerTeam("beta", Path("/jobs/mnist/config.ini"))
HERE = teams.OwnerTeam("gamma", Path("/here/config.ini"))


@pytest.mark.parametrize(
    "option, job, default, here, expected",
    [
        ("alpha", JOB, "delta", HERE, ("alpha", "-t", True)),
        (None, JOB, "delta", HERE, ("beta", "[owner] team of /jobs/mnist/config.ini", False)),
        (None, JOB, "beta", HERE, ("beta", "[owner] team of /jobs/mnist/config.ini", True)),
        (None, JOB, None, HERE, ("beta", "[owner] team of /jobs/mnist/config.ini", True)),
        (None, None, "delta", HERE, ("delta", teams.FROM_DEFAULT, True)),
        (None, None, None, HERE, ("gamma", "[owner] team of /here/config.ini", True)),
        (None, teams.OwnerTeam(None, Path("/x/config.ini")), "delta", None, ("delta", teams.FROM_DEFAULT, True)),
        ("", JOB, "delta", HERE, ("", "-t", True)),  # -t '': the runs without a team
        (None, None, None, None, None),
    ],
)
def test_which_team_a_command_is_for(option, job, default, here, expected):
    choice = teams.choose_team(option, job, default, here)
    assert (None if choice is None else (choice.name, choice.source, choice.own)) == expected


def test_blank_names_are_no_team_and_the_spec_chooses_the_same_way(tmp_path):
    """One team choice: the spec's team is `choose_team`'s (-t, else [owner] team, else the default team)."""
    assert teams.choose_team(None, teams.OwnerTeam("  ", Path("/x/config.ini")), "  ", HERE).name == "gamma"
    assert teams.choose_team(None, JOB, " delta ").own is False
    job = write_job(tmp_path, team="beta")
    for option, default, expected in [("alpha", "delta", "alpha"), ("", "delta", None), (None, "delta", "beta")]:
        spec = load_job_spec(job, team=option, default_team=default)
        choice = teams.choose_team(option, teams.OwnerTeam("beta", job / "config.ini"), default)
        assert spec.team == expected == (choice.name or None)
        assert spec.origin("team") == choice.source
    nobody = write_job(tmp_path, "nobody")
    assert load_job_spec(nobody, default_team=" delta ").origin("team") == teams.FROM_DEFAULT
    assert load_job_spec(nobody).team is None and load_job_spec(nobody).origin("team") is None


def test_a_choice_says_which_team_and_why():
    assert teams.choose_team("alpha").phrase() == "of team alpha"
    assert teams.choose_team(None, default="alpha").phrase() == f"of team alpha ({teams.FROM_DEFAULT})"
    assert teams.choose_team("").phrase() == "without a team"
    assert teams.choose_team("").label is None
    assert teams.choose_team("Vision Research").label == "Vision-Research"


# --- a team's namespace and queue ------------------------------------------------------------------------------


def test_team_mappings_are_read_with_teams_as_label_values():
    mapping = teams.parse_mapping(teams.TEAM_NAMESPACES, "vision:ml-vision, Vision Research : ml-vr;nlp:ml-nlp\n")
    assert mapping.entries == (("vision", "ml-vision"), ("Vision-Research", "ml-vr"), ("nlp", "ml-nlp"))
    assert mapping.get("Vision Research") == "ml-vr" and mapping.get(" nlp ") == "ml-nlp"
    assert mapping.get("other") is None and mapping.get(None) is None
    assert teams.parse_mapping(teams.TEAM_QUEUES, None).entries == ()
    assert teams.mapping({"team_queues": "vision:vision.gpus"}, teams.TEAM_QUEUES).get("vision") == "vision.gpus"


def test_a_teams_namespace_is_its_mapped_one_else_the_cluster_wide_setting():
    settings = {"team_namespaces": "vision:ml-vision", "namespace": "ml-all", "team_queues": "nlp:nlp-gpus"}
    assert teams.team_value(settings, "namespace", "vision") == (
        "ml-vision",
        "ml_training_team_namespaces for team vision",
    )
    assert teams.team_value(settings, "namespace", "nlp") == ("ml-all", None)
    assert teams.team_value(settings, "namespace", None) == ("ml-all", None)
    assert teams.team_value(settings, "queue", "nlp") == ("nlp-gpus", "ml_training_team_queues for team nlp")
    assert teams.team_value(settings, "queue", "vision") == (None, None)
    with pytest.raises(SettingError):
        teams.team_value({"team_namespaces": "vision"}, "namespace", "vision")


@pytest.mark.parametrize(
    "key, text, problem, fix",
    [
        (teams.TEAM_NAMESPACES, "vision=ml-vision", "'vision=ml-vision' is not `team:namespace`", "vision:ml-vision"),
        (teams.TEAM_NAMESPACES, "vision:ML_Vision", "'ML_Vision' (of team vision) is not a namespace", "lower-case"),
        (teams.TEAM_QUEUES, "vision:", "'vision:' is not `team:name`", "vision:vision-gpus"),
        (teams.TEAM_NAMESPACES, "R&D:ml-rd", "cannot be a Kubernetes label value", "`R-D:ml-rd`"),
        (teams.TEAM_NAMESPACES, "a:ml-a, a:ml-b", "team a is mapped twice (ml-a, ml-b)", "keep one"),
    ],
)
def test_a_malformed_mapping_names_the_setting_and_the_fix(key, text, problem, fix):
    with pytest.raises(SettingError) as error:
        teams.parse_mapping(key, text)
    variable = f"VDK_{key.upper()}"
    assert error.value.problem.startswith(f"VDK configuration {key} ({variable}): ")
    assert problem in error.value.problem
    assert fix in error.value.fix and variable in error.value.fix
