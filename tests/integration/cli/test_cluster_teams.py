"""Teams sharing one namespace, through the real vdk CLI and the fake API server: teams alpha and beta
each deploy a job called `mnist`. Every verb works on one team's runs; none picks, counts or deletes
the other team's silently, with or without -t and with or without a default team."""

import json

import pytest

from tests.support import cluster_state as cs
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.manifests import render_run

RUN_LISTS = ("/pytorchjobs", "/trainjobs", "/jobs")


class SharedCluster:
    def __init__(self, fake, client, root):
        self.fake, self.client, self.root = fake, client, root
        self.count = 0

    def deploy(self, team, job="mnist", ago=60, namespace="ml", log=None, strip_team=False, **keys) -> str:
        """A run of `job` of `team` (None: no [owner] team), created `ago` seconds ago, its rank 0 running."""
        self.count += 1
        spec = make_spec(self.root / f"job-{self.count}", name=job, team=team, nodes="1", gpus_per_node="0", **keys)
        manifests = render_run(spec, IMAGE, make_run(spec), namespace, "job")
        if strip_team:  # a run made by a version that did not label teams
            for manifest in manifests:
                manifest["metadata"]["labels"].pop("vdk.io/team", None)
        client = self.client if namespace == "ml" else KubeClient(namespace=namespace)
        main = client.apply(manifests)[0]
        name = main["metadata"]["name"]
        self.fake.objects[("batch/v1", "jobs", namespace, name)]["metadata"]["creationTimestamp"] = cs.ago(ago)
        self.fake.set_status("jobs", name, {"active": 1}, namespace=namespace)
        pod = self.fake.add("pods", cs.rank_pod(main, "job", 0, cs.running()), namespace=namespace)
        self.fake.set_log(pod["metadata"]["name"], "pytorch", log or f"{team} trains\n", namespace=namespace)
        return name

    def runs(self, namespace="ml") -> dict[str, list[str]]:
        """Run names by team label ("" for none)."""
        by_team: dict[str, list[str]] = {}
        for job in self.fake.stored("jobs", namespace):
            labels = job["metadata"]["labels"]
            by_team.setdefault(labels.get("vdk.io/team", ""), []).append(job["metadata"]["name"])
        return {team: sorted(names) for team, names in by_team.items()}

    def run_lists(self) -> int:
        return len([p for m, p, _ in self.fake.requests if m == "GET" and p.endswith(RUN_LISTS)])


@pytest.fixture
def shared(cluster, tmp_path):
    fake, client = cluster(pytorchjob=True, namespaces=("default", "ml", "ml-beta"))
    return SharedCluster(fake, client, tmp_path / "jobs")


@pytest.fixture
def two_teams(shared):
    """alpha's run of mnist, and beta's newer one."""
    shared.alpha = shared.deploy("alpha", ago=600)
    shared.beta = shared.deploy("beta", ago=60)
    return shared


def ok(result):
    assert result.exit_code == 0, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def refused(result):
    assert result.exit_code == 1 and result.stdout == "", f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result.stderr


# --- vdk list --------------------------------------------------------------------------------------------


def test_list_shows_one_row_per_team_and_job(two_teams):
    lines = ok(vdk("list")).stdout.splitlines()
    assert lines[0] == "ml-training jobs in namespace ml (context fake):"
    rows = [line.split() for line in lines[2:]]
    assert [(r[0], r[1], r[2], r[-1]) for r in rows] == [
        ("mnist", "alpha", two_teams.alpha, "1"),
        ("mnist", "beta", two_teams.beta, "1"),  # beta's run is not counted as alpha's
    ]
    entries = json.loads(ok(vdk("list", "-o", "json")).stdout)
    assert [(e["job_name"], e["job_team"], e["latest_run"], e["runs"]) for e in entries] == [
        ("mnist", "alpha", two_teams.alpha, 1),
        ("mnist", "beta", two_teams.beta, 1),
    ]


def test_list_shows_the_default_team_s_jobs_and_all_with_a(two_teams):
    ok(vdk("set-default", "-t", "beta"))
    out = ok(vdk("list")).stdout
    assert out.startswith("ml-training jobs of team beta (your default team, `vdk set-default`) in namespace ml")
    assert two_teams.beta in out and two_teams.alpha not in out
    assert [e["job_team"] for e in json.loads(ok(vdk("list", "-o", "json")).stdout)] == ["beta"]
    assert [e["job_team"] for e in json.loads(ok(vdk("list", "-a", "-o", "json")).stdout)] == ["alpha", "beta"]
    assert [e["job_team"] for e in json.loads(ok(vdk("list", "-t", "alpha", "-o", "json")).stdout)] == ["alpha"]


def test_runs_without_a_team_label_are_shown_as_such(two_teams):
    old = two_teams.deploy("alpha", ago=9000, strip_team=True)
    rows = [line.split() for line in ok(vdk("list")).stdout.splitlines()[2:]]
    assert [(r[0], r[1], r[2], r[-1]) for r in rows[:2]] == [
        ("mnist", "alpha", two_teams.alpha, "1"),
        ("mnist", "beta", two_teams.beta, "1"),
    ]
    assert ok(vdk("list")).stdout.splitlines()[4].startswith(f"mnist  (no team)  {old}  ")
    entries = json.loads(ok(vdk("list", "-t", "", "-o", "json")).stdout)
    assert [(e["job_team"], e["latest_run"]) for e in entries] == [(None, old)]
    shown = json.loads(ok(vdk("show", "-n", "mnist", "-t", "", "-o", "json")).stdout)
    assert shown["job_team"] is None and [r["name"] for r in shown["runs"]] == [old]


def test_list_needs_the_same_requests_however_many_teams(shared):
    for team in ("alpha", "beta", "gamma", "delta"):
        shared.deploy(team)
    shared.fake.requests.clear()
    ok(vdk("list"))
    assert shared.run_lists() == 3  # one labelled list per backend, and nothing else
    assert len(shared.fake.requests) == 3


# --- vdk show / execute --logs -----------------------------------------------------------------------------


def test_an_ambiguous_name_is_refused_with_the_teams_to_choose_from(two_teams):
    for args in (["show", "-n", "mnist"], ["execute", "--logs", "-n", "mnist"], ["execute", "--list", "-n", "mnist"]):
        stderr = refused(vdk(*args))
        assert "mnist has runs of 2 teams in namespace ml (context fake): team alpha (1 run), team beta (1 run)" in (
            stderr
        )
        assert "name the team with -t, e.g. `vdk " in stderr and " -n mnist -t alpha`" in stderr


def test_show_and_logs_work_on_the_named_team(two_teams):
    shown = json.loads(ok(vdk("show", "-n", "mnist", "-t", "alpha", "-o", "json")).stdout)
    assert shown["job_team"] == "alpha" and [r["name"] for r in shown["runs"]] == [two_teams.alpha]
    out = ok(vdk("show", "-n", "mnist", "-t", "alpha")).stdout
    assert out.startswith("mnist of team alpha: 1 run in namespace ml (context fake)\n")
    assert f"Latest run {two_teams.alpha}" in out and two_teams.beta not in out.split("note:")[0]
    assert "note: mnist also has team beta (1 run): vdk show -n mnist -t beta" in out
    assert "Logs of every rank: vdk execute --logs -n mnist -t alpha" in out
    assert ok(vdk("execute", "--logs", "-n", "mnist", "-t", "beta")).stdout == "[rank 0] beta trains\n"
    assert ok(vdk("execute", "--logs", "-n", "mnist", "-t", "alpha")).stdout == "[rank 0] alpha trains\n"


def test_the_default_team_is_used_without_t(two_teams):
    teams.write_default_team("alpha")  # as `vdk set-default -t alpha` writes it
    # beta's run is the newer one: "the latest run" is the default team's latest, not beta's
    assert ok(vdk("execute", "--logs", "-n", "mnist")).stdout == "[rank 0] alpha trains\n"
    assert json.loads(ok(vdk("show", "-n", "mnist", "-o", "json")).stdout)["runs"][0]["name"] == two_teams.alpha
    out = ok(vdk("show", "-n", "mnist")).stdout
    assert "Logs of every rank: vdk execute --logs -n mnist\n" in out  # no -t needed for the default team
    assert ok(vdk("execute", "--logs", "-n", "mnist", "-t", "beta")).stdout == "[rank 0] beta trains\n"


def test_a_default_team_without_runs_of_the_job_is_not_replaced_by_another_team(two_teams):
    teams.write_default_team("gamma")
    stderr = refused(vdk("execute", "--logs", "-n", "mnist"))
    assert "there are no runs of mnist of team gamma (your default team, `vdk set-default`) in namespace ml" in stderr
    assert "mnist has team alpha (1 run), team beta (1 run)" in stderr
    assert "`vdk execute --logs -n mnist -t alpha`" in stderr


def test_a_team_name_that_cannot_be_a_label_is_an_error_with_the_fix(two_teams):
    stderr = refused(vdk("show", "-n", "mnist", "-t", "R&D/vision"))
    assert "team 'R&D/vision' cannot be a Kubernetes label value" in stderr
    assert "Fix: use a team name such as 'R-D-vision'" in stderr


# --- vdk execute --start / --cancel -------------------------------------------------------------------------


def test_start_reruns_the_chosen_team_s_latest_run(two_teams):
    refused(vdk("execute", "--start", "-n", "mnist"))  # ambiguous: nothing started
    assert two_teams.runs() == {"alpha": [two_teams.alpha], "beta": [two_teams.beta]}
    teams.write_default_team("alpha")
    started = json.loads(ok(vdk("execute", "--start", "-n", "mnist", "-o", "json")).stdout)
    assert started["rerun_of"] == two_teams.alpha and started["job_team"] == "alpha"
    assert two_teams.runs()["alpha"] == sorted([two_teams.alpha, started["run"]])  # the re-run is alpha's too
    text = ok(vdk("execute", "--start", "-n", "mnist", "-t", "beta")).stdout
    assert f"of mnist of team beta: a re-run of {two_teams.beta}" in text
    assert "vdk show -n mnist -t beta" in text
    assert len(two_teams.runs()["beta"]) == 2


def test_cancel_of_another_team_s_run_needs_its_team_named(two_teams):
    teams.write_default_team("alpha")
    beta_id = two_teams.beta.rsplit("-", 1)[1]
    stderr = refused(vdk("execute", "--cancel", "-n", "mnist", "-i", beta_id))
    assert f"run {two_teams.beta} is not one of mnist of team alpha: it belongs to team beta" in stderr
    assert f"`vdk execute --cancel -i {beta_id} -n mnist -t beta`" in stderr
    assert two_teams.runs() == {"alpha": [two_teams.alpha], "beta": [two_teams.beta]}  # nothing was cancelled
    out = ok(vdk("execute", "--cancel", "-n", "mnist", "-i", beta_id, "-t", "beta")).stdout
    assert f"Cancelled {two_teams.beta} of mnist of team beta (was Running)" in out
    assert two_teams.runs() == {"alpha": [two_teams.alpha]}


def test_cancel_without_a_team_of_yours_cancels_nothing(two_teams):
    two_teams.deploy("gamma", job="bert")
    gamma_run = two_teams.runs()["gamma"][0]
    stderr = refused(vdk("execute", "--cancel", "-n", "bert", "-i", gamma_run))
    assert "are team gamma's, and no team of yours is known" in stderr
    assert f"`vdk execute --cancel -i {gamma_run} -n bert -t gamma`" in stderr
    assert two_teams.runs()["gamma"] == [gamma_run]


# --- vdk delete ----------------------------------------------------------------------------------------------


def test_a_cross_team_delete_without_t_deletes_nothing(two_teams):
    before = two_teams.runs()
    for args in (["delete", "-n", "mnist", "--yes"], ["delete", "-n", "mnist"]):
        stderr = refused(vdk(*args, input="y\n"))
        assert "mnist has runs of 2 teams" in stderr and "`vdk delete -n mnist -t alpha`" in stderr
    assert two_teams.runs() == before
    # with only beta's runs left, a caller with no team of theirs still has to name it
    ok(vdk("delete", "-n", "mnist", "-t", "alpha", "--yes"))
    stderr = refused(vdk("delete", "-n", "mnist", "--yes"))
    assert "are team beta's, and no team of yours is known" in stderr
    assert two_teams.runs() == {"beta": [two_teams.beta]}


def test_delete_removes_only_the_default_team_s_runs_and_says_whose(two_teams):
    second_alpha = two_teams.deploy("alpha", ago=30)
    ok(vdk("set-default", "-t", "alpha"))
    declined = vdk("delete", "-n", "mnist", input="n\n")
    assert declined.exit_code == 1
    assert "Delete these 2 runs of mnist of team alpha, their pods (running ones stop) and run records?" in (
        declined.stderr
    )
    two_teams.fake.requests.clear()
    result = ok(vdk("delete", "-n", "mnist", "--yes"))
    assert "Deleting 2 runs of mnist of team alpha (--yes)" in result.stderr
    assert "Kept: mnist's runs of team beta (1 run)" in result.stderr
    assert sorted(result.stdout.split()) == sorted(["Deleted", two_teams.alpha, "Deleted", second_alpha])
    assert two_teams.runs() == {"beta": [two_teams.beta]}
    assert two_teams.run_lists() == 1  # the runs were listed once: one list of the one backend the job uses
    # another team's runs: only when named
    result = ok(vdk("delete", "-n", "mnist", "-t", "beta", "--yes"))
    assert "Deleting 1 run of mnist of team beta (--yes)" in result.stderr
    assert two_teams.runs() == {}


def test_runs_without_a_team_may_be_deleted_by_naming_them(two_teams):
    old = two_teams.deploy(None, ago=9000)
    ok(vdk("delete", "-n", "mnist", "-t", "", "--yes"))
    assert two_teams.runs() == {"alpha": [two_teams.alpha], "beta": [two_teams.beta]}
    only_old = two_teams.deploy(None, job="bert")  # a job whose runs have no team: nobody else's to protect
    ok(vdk("delete", "-n", "bert", "--yes"))
    assert only_old not in str(two_teams.runs()) and old not in str(two_teams.runs())


# --- the job directory: -p and the current directory ----------------------------------------------------------


def test_p_names_the_job_and_its_team(two_teams, tmp_path):
    job = make_spec(tmp_path / "checkout", name="mnist", team="beta").job_dir
    out = ok(vdk("show", "-p", str(job))).stdout
    assert out.startswith("mnist of team beta ([owner] team of ") and f"Latest run {two_teams.beta}" in out
    assert ok(vdk("execute", "--logs", "-p", str(job))).stdout == "[rank 0] beta trains\n"
    # beta's job, but alpha is the caller's default team: reading is fine, deleting needs -t
    teams.write_default_team("alpha")
    assert ok(vdk("execute", "--logs", "-p", str(job))).stdout == "[rank 0] beta trains\n"
    stderr = refused(vdk("delete", "-p", str(job), "--yes"))
    assert "team beta ([owner] team of " in stderr and "is not your default team" in stderr
    assert two_teams.runs() == {"alpha": [two_teams.alpha], "beta": [two_teams.beta]}
    ok(vdk("delete", "-p", str(job), "-t", "beta", "--yes"))
    assert two_teams.runs() == {"alpha": [two_teams.alpha]}


def test_in_a_job_directory_its_team_and_name_are_the_defaults(two_teams, tmp_path, monkeypatch):
    job = make_spec(tmp_path / "checkout", name="mnist", team="beta").job_dir
    monkeypatch.chdir(job)
    assert ok(vdk("execute", "--logs")).stdout == "[rank 0] beta trains\n"
    assert [e["job_team"] for e in json.loads(ok(vdk("list", "-o", "json")).stdout)] == ["beta"]
    teams.write_default_team("alpha")  # the default team comes before the directory's
    assert ok(vdk("execute", "--logs")).stdout == "[rank 0] alpha trains\n"


# --- a team's own namespace ---------------------------------------------------------------------------------


def test_verbs_look_for_a_team_s_runs_in_its_namespace(shared, monkeypatch):
    monkeypatch.setenv("VDK_ML_TRAINING_TEAM_NAMESPACES", "beta:ml-beta")
    alpha = shared.deploy("alpha")
    beta = shared.deploy("beta", namespace="ml-beta")
    assert ok(vdk("execute", "--logs", "-n", "mnist", "-t", "beta")).stdout == "[rank 0] beta trains\n"
    shown = json.loads(ok(vdk("show", "-n", "mnist", "-t", "beta", "-o", "json")).stdout)
    assert shown["namespace"] == "ml-beta" and [r["name"] for r in shown["runs"]] == [beta]
    out = ok(vdk("list", "-a")).stdout
    assert alpha in out and beta not in out
    assert "Teams with a namespace of their own: beta (ml-beta); `vdk list -t TEAM` lists a team's jobs." in out
    assert beta in ok(vdk("list", "-t", "beta")).stdout
    ok(vdk("delete", "-n", "mnist", "-t", "beta", "--yes"))
    assert shared.runs("ml-beta") == {} and shared.runs() == {"alpha": [alpha]}
