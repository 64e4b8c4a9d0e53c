"""The verbs' requests to the API server do not grow with the runs of a namespace or the pods of a run
(benchmarks/control_plane.py prints them for 1,000 runs): `vdk list` sends one list per backend, `vdk
show` six requests (the job's run records, its backend's runs, pods, events, rank 0's log, and the shown run's
record: the data it trained on) plus the log of the rank that failed."""

import json

import pytest

from tests.support import busy_namespace
from tests.support.vdk_cli import vdk

VERBS = {
    "list": ("list", "-a"),
    "list of a team": ("list", "-t", "team-1"),
    "show": ("show", "-n", "job-07", "-t", "team-2"),
    "show of a 64-node run": ("show", "-n", busy_namespace.BIG_JOB, "-t", "team-0"),
    "show of a failed 64-node run": ("show", "-n", "big-failed", "-t", "team-0"),
    "execute --logs of a 64-node run": ("execute", "--logs", "-n", busy_namespace.BIG_JOB, "-t", "team-0"),
}


@pytest.fixture
def counted(cluster, tmp_path):
    """count(runs, jobs) -> {verb: the requests it sent} in a fresh namespace of that many runs."""

    def count(runs: int, jobs: int) -> dict[str, list]:
        fake, _ = cluster(pytorchjob=True, trainer_mechanism="runtimePatches")
        busy_namespace.populate(fake, tmp_path / f"{runs}", runs=runs, jobs=jobs)
        busy_namespace.big_run(fake, tmp_path / f"{runs}")
        busy_namespace.big_run(fake, tmp_path / f"{runs}", failed=True, name="big-failed")
        sent = {}
        for verb, argv in VERBS.items():
            fake.requests.clear()
            result = vdk(*argv)
            assert result.exit_code == 0, result.stderr
            sent[verb] = list(fake.requests)
        return sent

    return count


def logs(requests) -> list:
    return [path for _, path, _ in requests if path.endswith("/log")]


def test_no_verb_sends_a_request_per_run_or_per_pod(counted):
    few, many = counted(runs=15, jobs=12), counted(runs=150, jobs=12)
    for verb in VERBS:
        assert len(few[verb]) == len(many[verb]), verb
    assert len(many["list"]) == len(many["list of a team"]) == 3  # one list per backend
    assert len(many["show"]) == len(many["show of a 64-node run"]) == 6
    kinds = sorted(path.rsplit("/", 1)[-1] for _, path, _ in many["show of a 64-node run"])
    record = f"{busy_namespace.BIG_JOB}-"  # the shown run's record, by name
    assert sorted(k if not k.startswith(record) else "record" for k in kinds) == [
        "configmaps", "events", "log", "pods", "pytorchjobs", "record"
    ]  # fmt: skip
    # a failed run: the log of the rank that failed first (the stalled one), and rank 0's for its progress
    failed = many["show of a failed 64-node run"]
    assert len(failed) - len(logs(failed)) == 5 and len(logs(failed)) == 2
    assert any(f"-worker-{busy_namespace.STALLED_RANK - 1}/log" in path for path in logs(failed))
    # logs of every rank: one request per pod, as the API has no request for the logs of several pods
    assert len(logs(many["execute --logs of a 64-node run"])) == 64


def test_what_the_verbs_show_of_a_busy_namespace(cluster, tmp_path):
    fake, _ = cluster(pytorchjob=True, trainer_mechanism="runtimePatches")
    names = busy_namespace.populate(fake, tmp_path, runs=60, jobs=12)
    busy_namespace.big_run(fake, tmp_path, failed=True)
    listed = json.loads(vdk("list", "-a", "-o", "json").stdout)
    assert sorted(e["job_name"] for e in listed) == sorted([*names, busy_namespace.BIG_JOB])
    assert {e["phase"] for e in listed if e["job_name"] != busy_namespace.BIG_JOB} == {"Running"}
    assert {e["backend"] for e in listed} == set(busy_namespace.BACKENDS)
    shown = json.loads(vdk("show", "-n", busy_namespace.BIG_JOB, "-t", "team-0", "-o", "json").stdout)["latest"]
    assert shown["phase"] == "Stalled" and shown["stall"]["rank"] == str(busy_namespace.STALLED_RANK * 8)
    assert len(shown["ranks"]) == 64 and len(shown["loss_curve"]) == 123
