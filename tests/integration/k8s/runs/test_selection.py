"""The runs of one (team, job): selected by label from runs really applied to the fake API server, with the
errors users see when the team is missing, ambiguous, or not theirs to change."""

from pathlib import Path

import pytest

from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job.teams import OwnerTeam
from vdk.plugin.ml_training.job.teams import choose_team
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs.selection import by_team
from vdk.plugin.ml_training.k8s.runs.selection import select_job
from vdk.plugin.ml_training.k8s.runs.selection import select_jobs

RUN_LISTS = ("/pytorchjobs", "/trainjobs", "/jobs")


@pytest.fixture
def shared(cluster, tmp_path):
    """Teams alpha and beta each with a job `mnist` in namespace ml (beta's run is the newest); alpha also
    has `bert`; one run of `mnist` has no team label (deployed without a team, or by an earlier version)."""
    fake, client = cluster(pytorchjob=True)
    names = {}
    for key, team, job, created in (
        ("unlabelled", None, "mnist", "2026-01-01T00:00:00Z"),
        ("alpha", "alpha", "mnist", "2026-01-02T00:00:00Z"),
        ("alpha-bert", "alpha", "bert", "2026-01-02T00:00:00Z"),
        ("beta", "Beta Team", "mnist", "2026-01-03T00:00:00Z"),
    ):
        spec = make_spec(tmp_path / key, name=job, team=team, nodes="1", gpus_per_node="0")
        main = client.apply(render_run(spec, IMAGE, make_run(spec), "ml", "job"))[0]
        fake.objects[("batch/v1", "jobs", "ml", main["metadata"]["name"])]["metadata"]["creationTimestamp"] = created
        names[key] = main["metadata"]["name"]
    fake.requests.clear()
    return fake, client, names


def run_lists(fake) -> list[str]:
    return [p for m, p, _ in fake.requests if m == "GET" and p.endswith(RUN_LISTS)]


def test_runs_are_grouped_by_their_team_label(shared):
    fake, client, names = shared
    groups = by_team(client.list_runs(job_name="mnist"))
    assert [(g.label, g.name, [r.name for r in g.runs]) for g in groups] == [
        ("Beta-Team", "Beta Team", [names["beta"]]),  # shown as written, selected by its label value
        ("alpha", "alpha", [names["alpha"]]),
        (None, "(no team)", [names["unlabelled"]]),
    ]
    assert [g.option() for g in groups] == ["-t Beta-Team", "-t alpha", "-t ''"]


def test_the_chosen_team_s_runs_with_one_labelled_list_per_backend(shared):
    fake, client, names = shared
    selection = select_job(client, "mnist", choose_team("Beta Team"), "vdk show -n mnist")
    assert [r.name for r in selection.runs] == [names["beta"]]
    assert selection.describe() == "mnist of team Beta Team" and selection.team_name == "Beta Team"
    assert sorted(g.label or "" for g in selection.others) == ["", "alpha"]
    # the job's run records (metadata only) name the backends it uses: one list for each of those, whatever
    # the number of teams and runs
    assert run_lists(fake) == ["/apis/batch/v1/namespaces/ml/jobs"]
    assert [q for m, p, q in fake.requests if p.endswith("/configmaps")] == [
        {"labelSelector": "vdk.io/job-name=mnist,vdk.io/run,app.kubernetes.io/managed-by=vdk-ml-training"}
    ]
    unlabelled = select_job(client, "mnist", choose_team(""), "vdk show -n mnist")
    assert [r.name for r in unlabelled.runs] == [names["unlabelled"]] and unlabelled.team_name is None
    assert unlabelled.describe() == "mnist (runs without a team)"


def test_without_a_team_an_ambiguous_name_is_refused_with_the_teams_listed(shared):
    _, client, _ = shared
    with pytest.raises(MLTrainingError) as error:
        select_job(client, "mnist", None, "vdk execute --logs -n mnist")
    assert error.value.problem == (
        "mnist has runs of 3 teams in namespace ml (context fake): team Beta Team (1 run), team alpha (1 run), "
        "runs without a team (1 run)"
    )
    assert "`vdk execute --logs -n mnist -t Beta-Team`" in error.value.fix and "vdk set-default" in error.value.fix
    only = select_job(client, "bert", None, "vdk show -n bert")  # one team only: nothing to guess
    assert only.team_name == "alpha" and only.choice is None


def test_a_team_without_runs_of_the_job_is_not_replaced_by_another(shared):
    _, client, _ = shared
    with pytest.raises(MLTrainingError) as error:
        select_job(client, "bert", choose_team(None, default="Beta Team"), "vdk execute --start -n bert")
    assert error.value.problem == (
        "there are no runs of bert of team Beta Team (your default team, `vdk set-default`) in namespace ml "
        "(context fake); bert has team alpha (1 run)"
    )
    assert error.value.fix == "name the team with -t to work on those: `vdk execute --start -n bert -t alpha`"
    with pytest.raises(KubeApiError) as missing:
        select_job(client, "gpt", choose_team("alpha"), "vdk show -n gpt")
    assert missing.value.status == 404
    assert missing.value.problem == "there are no runs of gpt of team alpha in namespace ml (context fake)"


def test_changes_to_another_team_s_runs_need_that_team_named(shared):
    _, client, names = shared
    # no team known: even the only team's runs are not deleted without -t
    with pytest.raises(MLTrainingError) as error:
        select_job(client, "bert", None, "vdk delete -n bert", changes=True)
    assert "are team alpha's, and no team of yours is known" in error.value.problem
    assert "`vdk delete -n bert -t alpha`" in error.value.fix
    # the job's [owner] team is not the caller's default team
    theirs = choose_team(None, job=OwnerTeam("alpha", Path("/jobs/bert/config.ini")), default="Beta Team")
    assert select_job(client, "bert", theirs, "vdk show -n bert").team_name == "alpha"  # reading is fine
    with pytest.raises(MLTrainingError) as error:
        select_job(client, "bert", theirs, "vdk delete -p /jobs/bert", changes=True)
    assert error.value.problem.startswith("team alpha ([owner] team of /jobs/bert/config.ini) is not your default")
    assert "`vdk delete -p /jobs/bert -t alpha`" in error.value.fix
    # named with -t, or the default team: allowed
    assert select_job(client, "bert", choose_team("alpha"), "vdk delete -n bert", changes=True).team_name == "alpha"
    mine = choose_team(None, default="alpha")
    assert [r.name for r in select_job(client, "mnist", mine, "x", changes=True).runs] == [names["alpha"]]
    # runs without a team belong to no one: with no team known they may be changed
    assert select_job(client, "mnist", choose_team(""), "x", changes=True).team.label is None


def test_a_run_of_another_team_is_named_as_such(shared):
    _, client, names = shared
    selection = select_job(client, "mnist", choose_team(None, default="alpha"), "vdk execute --cancel -n mnist")
    assert selection.pick(None, "x").name == names["alpha"]  # the team's latest, not beta's newer run
    beta_id = names["beta"].rsplit("-", 1)[1]
    with pytest.raises(MLTrainingError) as error:
        selection.pick(beta_id, f"vdk execute --cancel -i {beta_id} -n mnist")
    assert error.value.problem == f"run {names['beta']} is not one of mnist of team alpha: it belongs to team Beta Team"
    assert error.value.fix == f"name its team to work on it: `vdk execute --cancel -i {beta_id} -n mnist -t Beta-Team`"


def test_jobs_are_listed_per_team_and_job(shared):
    fake, client, names = shared
    everything = select_jobs(client, None)
    assert [(j.job_name, j.team_name, len(j.runs)) for j in everything] == [
        ("bert", "alpha", 1),
        ("mnist", "Beta Team", 1),
        ("mnist", "alpha", 1),
        ("mnist", None, 1),
    ]
    fake.requests.clear()
    alpha = select_jobs(client, choose_team("alpha"))
    assert [(j.job_name, j.team_name) for j in alpha] == [("bert", "alpha"), ("mnist", "alpha")]
    assert all("vdk.io/team=alpha" in q["labelSelector"] for m, p, q in fake.requests if p.endswith(RUN_LISTS))
    assert [(j.job_name, j.team_name) for j in select_jobs(client, choose_team(""))] == [("mnist", None)]
