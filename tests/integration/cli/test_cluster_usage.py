"""`vdk list --usage`: GPU-hours by team and job, by cause, and the measured utilisation, in text and JSON, from
runs whose operators recorded known times (succeeded with its node's GPU totals, failed, stalled, running, MIG,
several nodes) and a run that `vdk execute --cancel` deleted."""

import json
import time

import pytest

from tests.support import cluster_state as cs
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s import gpu_hours
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.runtime import progress_lines
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.watchdog import Stall

H = 3600
PLURAL = {"pytorchjob": "pytorchjobs", "trainjob": "trainjobs", "job": "jobs"}


def ended(condition: str, started: float, end: float) -> dict:
    """A finished run's status as its operator writes it; times are seconds ago."""
    at = cs.ago(end)
    return {
        "startTime": cs.ago(started),
        "completionTime": at,
        "conditions": [{"type": condition, "status": "True", "lastTransitionTime": at}],
    }


@pytest.fixture
def namespace(cluster, tmp_path):
    """Two teams' runs with known times, and the names of the runs."""
    fake, client = cluster(pytorchjob=True, trainer_mechanism="runtimePatches")
    names = {}

    def run(key, job, team, backend, status, created=None, pods=(), **keys):
        spec = make_spec(tmp_path / key, name=job, team=team, **keys)
        main = client.apply(render_run(spec, IMAGE, make_run(spec), "ml", backend))[0]
        name = names[key] = main["metadata"]["name"]
        if created is not None:
            fake.objects[(main["apiVersion"], PLURAL[backend], "ml", name)]["metadata"]["creationTimestamp"] = created
        fake.set_status(PLURAL[backend], name, status)
        for rank, state in pods:
            fake.add("pods", cs.rank_pod(main, backend, rank, state))

    # vision: 2 x 8 GPUs for 10 h, 30 min of it after the last optimizer step; node 0's GPU totals: its first
    # step 1 h after the start, idle a quarter of the time between, SM activity 50%; 4 GPUs for 2 h that failed
    last = progress_lines.format_line(900, 900, 0.2, 1.5, 36000, None, "finished", 1800)
    gpus = GpuFigures(
        gpus=8, model="NVIDIA H100 80GB HBM3", source="gpm", sm_mean=50.0, busy_gpu_s=0.5 * 8 * 10 * H,
        sampled_gpu_s=8 * 10 * H, window_gpu_s=8 * 8.5 * H, idle_gpu_s=2 * 8.5 * H, first_step=time.time() - 11 * H,
        final=True,
    )  # fmt: skip
    done = cs.terminated(0, "Completed", message=f"{last}\n{gpus.line()}")
    succeeded = ended("Succeeded", 12 * H, 2 * H)
    run("done", "mnist", "vision", "pytorchjob", succeeded, pods=[(0, done)], nodes="2", gpus_per_node="8")
    run("failed", "mnist", "vision", "job", ended("Failed", 5 * H, 3 * H), nodes="1", gpus_per_node="4")
    # nlp: 3 x 8 GPUs stopped after 1 h by the stall watchdog; 2 MIG slices running for 7 h; 4 GPUs for 1 h
    stall = cs.terminated(1, message="\n".join(Stall("8", 1800, 42, None).lines()))
    failed = ended("Failed", 4 * H, 3 * H)
    run("stalled", "bert", "nlp", "pytorchjob", failed, pods=[(1, stall)], nodes="3", gpus_per_node="8")
    running = {"jobsStatus": [{"name": "node", "active": 1, "ready": 1}]}
    run("mig", "bert", "nlp", "trainjob", running, created=cs.ago(7 * H), nodes="2", gpus_per_node="1g.10gb")
    run("cancel", "bert", "nlp", "job", {"startTime": cs.ago(H), "active": 1, "ready": 1}, gpus_per_node="4")
    return fake, names


def usage_json(*args: str) -> dict:
    result = vdk("list", "--usage", *args, "-o", "json")
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def test_gpu_hours_and_waste_by_team_and_job(namespace):
    fake, names = namespace
    cancelled = vdk("execute", "--cancel", "-n", "bert", "-t", "nlp", "-i", names["cancel"])
    assert cancelled.exit_code == 0, cancelled.stderr
    kept = [c["metadata"]["name"] for c in fake.stored("configmaps") if "vdk.io/usage-of" in c["metadata"]["labels"]]
    assert kept == [f"{names['cancel']}-usage"]  # the run is gone, its usage record stays

    data = usage_json("-a")
    assert (data["kind"], data["namespace"], data["team"]) == ("ml-training-usage", "ml", None)
    approx = pytest.approx
    assert data["totals"]["gpu_hours"] == approx(160 + 8 + 24 + 2 + 4, abs=0.05)
    # wasted: vision's failed run, after the last step, start-up (1 h of 16 GPUs), idle (a quarter of 8.5 h of
    # 16 GPUs); nlp's stalled and cancelled runs
    assert data["totals"]["wasted"] == approx(8 + 8 + 16 + 34 + 24 + 4, abs=0.05)
    teams = {t["team"]: t for t in data["teams"]}
    vision = teams["vision"]
    # (the API's times are whole seconds: abs=0.05)
    assert (vision["failed"], vision["after_last_step"]) == (approx(8), approx(8))
    assert vision["startup"] == approx(16, abs=0.05)
    assert (vision["idle"], vision["used"]) == (approx(34, abs=0.05), approx(102, abs=0.05))
    assert vision["utilisation"] == approx(0.5, abs=1e-3)  # of the measured run: the failed one has no figures
    assert (teams["nlp"]["stalled"], teams["nlp"]["cancelled"]) == (approx(24), approx(4, abs=0.05))
    assert teams["nlp"]["running"] == approx(2, abs=0.05) and teams["nlp"]["utilisation"] is None
    (bert,) = [j for j in data["jobs"] if j["job"] == "bert"]
    outcomes = {r["run"]: (r["outcome"], r["gpus"]) for r in bert["run_usage"]}
    assert outcomes == {
        names["stalled"]: ("stalled", 24),
        names["mig"]: ("running", approx(2 / 7, abs=1e-4)),
        names["cancel"]: ("cancelled", 4),
    }
    assert any("still running" in n for n in data["notes"])

    text = vdk("list", "--usage", "-a").stdout
    assert text.startswith("GPU-hours in namespace ml (context fake), ")
    lines = text.splitlines()
    assert lines[2].split() == [
        "TEAM", "RUNS", "GPU-HOURS", "UTIL", "USED", "IDLE", "START-UP", "AFTER", "LAST", "STEP", "REDONE", "FAILED",
        "STALLED", "CANCELLED", "RUNNING", "WASTED",
    ]  # fmt: skip
    assert lines[3].split()[:3] == ["nlp", "3", "30.0"]
    assert lines[4].split() == [
        "vision", "2", "168.0", "50%", "102.0", "34.0", "16.0", "8.0", "0.0", "8.0", "0.0", "0.0", "0.0", "66.0",
        "(39%)",
    ]  # fmt: skip
    assert lines[5].split()[:2] == ["total", "5"]
    assert "mnist" in text and "a MIG slice counts as its share of a GPU" in text
    assert "allocated = used + idle (SM activity under 5%) + start-up (start to first optimizer step)" in text
    assert "UTIL: SM-activity-weighted GPU-hours over the allocated ones" in text


def test_one_team_a_window_and_what_a_bad_window_says(namespace):
    vision = usage_json("-t", "vision")
    assert vision["team"] == "vision" and [t["team"] for t in vision["teams"]] == ["vision"]
    assert vision["totals"]["gpu_hours"] == pytest.approx(168, abs=0.05)
    text = vdk("list", "--usage", "-t", "vision").stdout
    assert text.startswith("GPU-hours of team vision in namespace ml")
    assert [line.split()[:3] for line in text.splitlines() if line.startswith(("vision", "total"))] == [
        ["vision", "mnist", "2"],
        ["total", "2", "168.0"],
    ]
    # the last 2.5 h: 30 min of the 16-GPU run (all after its last step), 2.5 h of the 2 MIG slices, the
    # running 4-GPU run's hour; the runs that ended 3 h ago are outside
    recent = usage_json("-a", "--since", "2h30m")
    assert recent["totals"]["gpu_hours"] == pytest.approx(8 + 2 / 7 * 2.5 + 4, abs=0.05)
    assert recent["totals"]["wasted"] == pytest.approx(8, abs=0.05)  # all after the last step
    bad = vdk("list", "--usage", "--since", "lately")
    assert bad.exit_code == 2 and "'lately' is not a duration: write it like 30d, 12h or 1w" in bad.stderr


def test_no_request_per_run(namespace):
    fake, _ = namespace
    fake.requests.clear()
    usage_json("-a")
    paths = sorted(p.rsplit("/", 1)[-1] for _, p, _ in fake.requests)
    assert paths == ["configmaps", "jobs", "pods", "pytorchjobs", "trainjobs"]


def test_deleted_runs_stay_counted_until_they_would_have_expired(namespace):
    fake, names = namespace
    old = gpu_hours.RunUsage("bert-old", "bert", "nlp", "nlp", "job", "succeeded", cs.T0, cs.T0, 8.0, None, 3600)
    fake.add("configmaps", gpu_hours.usage_record(old, "ml", "ada", cs.T0))  # expired long ago
    result = vdk("delete", "-n", "bert", "-t", "nlp", "--yes")
    assert result.exit_code == 0, result.stderr
    records = {c["metadata"]["name"] for c in fake.stored("configmaps") if "vdk.io/usage-of" in c["metadata"]["labels"]}
    assert records == {f"{names[key]}-usage" for key in ("stalled", "mig", "cancel")}  # the expired one was pruned
    by_run = {r["run"]: r["outcome"] for j in usage_json("-t", "nlp")["jobs"] for r in j["run_usage"]}
    # a deleted run that still ran was cancelled; one that had ended keeps how, the stall too: its pods were read
    # once for the records, with its nodes' GPU figures
    assert by_run == {names["stalled"]: "stalled", names["mig"]: "cancelled", names["cancel"]: "cancelled"}
    gone = vdk("show", "-n", "bert", "-t", "nlp")  # a usage record is no run
    assert gone.exit_code == 1 and "there are no runs of bert" in gone.stderr
