"""A real sweep end to end without a GPU: the manifests `vdk deploy` renders for a 6-trial sweep, created in the
fake API server (which validates them as the API server does), their pods run as local processes by the Job
controller's emulation (tests/support/job_controller.py): the study pod serves a real SQLite study through
Optuna's gRPC storage proxy, each trial pod asks it for its trial and runs the job's launch command (torchrun,
the bootstrap, the script). The script's metric is a known function of `lr`, so the best trial is known; the
trials far from it are pruned (their logs show fewer steps); one trial fails on purpose and the sweep goes on; a
trial's pod and the study's pod are killed on the way (a lost node, a restarted study) and nothing is lost.
Then what a user reads (`vdk show`, `vdk list`, a trial's log), the best trial started as a full run, and a
cancelled sweep that leaves nothing running."""

from __future__ import annotations

import json
import os
import re
import signal
import time

import pytest

from tests.support.job_controller import LocalJobController
from tests.support.jobs import write_job
from tests.support.specs import make_run
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.ops.deploy import deploy_spec
from vdk.plugin.ml_training.ops.runs import cancel_run
from vdk.plugin.ml_training.ops.scope import find_scope
from vdk.plugin.ml_training.ops.sweeps import show_sweep
from vdk.plugin.ml_training.ops.sweeps import start_trial
from vdk.plugin.ml_training.ops.sweeps import trial_log

pytestmark = pytest.mark.usefixtures("isolated_environment")

TEAM = "vision"
STEPS = 30
IMAGE = JobImage("registry.example.com/ml/lr-sweep@sha256:" + "cd" * 32, "python")
# The metric: (log10(lr) + 3)^2 plus a term that shrinks with the steps: best at lr = 1e-3. lr = 1 fails.
TRAIN = f"""
import argparse, math, time
import torch

parser = argparse.ArgumentParser()
parser.add_argument("--lr", type=float, required=True)
parser.add_argument("--batch-size", type=int, default=4)
args = parser.parse_args()
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for step in range({STEPS}):
    loss = model(torch.randn(args.batch_size, 2)).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    if args.lr >= 1:  # before its first report: a trial that reported could be pruned (rightly) before it fails
        raise FloatingPointError("the loss diverged")
    print(f"step {{step}}: score={{(math.log10(args.lr) + 3) ** 2 + 1 / (step + 1):.5f}}", flush=True)
    time.sleep(0.15)
"""
SWEEP = """
[ml-training.sweep]
lr = 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0
trials = 6
parallel = 2
metric = score
seed = 3
"""


def sweep_job(tmp_path, name="lr-sweep", extra=SWEEP):
    ml = {"args": "--lr ${lr}", "gpus_per_node": "0", "cpu": "1", "memory": "2Gi", "output_pvc": "sweeps"}
    env = {"VDK_ML_TRAINING_PROGRESS_SECONDS": "0.5"}
    return write_job(tmp_path, name, ml=ml, env=env, team=TEAM, extra=extra, files={"train.py": TRAIN})


@pytest.fixture
def sweep_cluster(cluster, tmp_path, monkeypatch):
    fake, client = cluster()
    fake.add_claim("sweeps")
    job = sweep_job(tmp_path / "jobs")
    claims = tmp_path / "claims"
    controller = LocalJobController(fake, job, {"sweeps": claims})  # started once the sweep is deployed
    monkeypatch.chdir(tmp_path)
    yield fake, client, job, controller, claims
    controller.stop()


def running_pod(controller, job_name: str, until=lambda pod: True):
    """The latest running pod of Job `job_name` for which `until` holds."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        live = [p for p in getattr(controller.jobs.get(job_name), "pods", []) if p.process.poll() is None]
        if live and until(live[-1]):
            return live[-1]
        time.sleep(0.1)
    raise AssertionError(f"no running pod of {job_name}: {controller.fake.logs}")


def log_of(fake, pod, container: str) -> str:
    return fake.logs.get(("ml", pod.name, container, False), "")


def deploy(client, job, name=None):
    spec = deploy_spec(job)
    run = make_run(spec, name=name)
    created = client.apply(render_run(spec, IMAGE, run, client.namespace, spec.backend))
    return run, created


def test_a_six_trial_sweep_finds_the_best_lr_prunes_the_hopeless_and_survives_a_failed_trial(sweep_cluster):
    fake, client, job, controller, claims = sweep_cluster
    run, created = deploy(client, job)
    assert [m["kind"] for m in created] == ["Job", "Job", "Service", "ConfigMap"]
    controller.start()
    # a lost node under a trial (its pod killed: the Job replaces it) and the study's pod killed mid-sweep
    killed = running_pod(controller, run.name, until=lambda pod: "score=" in log_of(fake, pod, "trial"))
    os.killpg(killed.process.pid, signal.SIGKILL)
    study_pod = running_pod(controller, f"{run.name}-study")
    os.killpg(study_pod.process.pid, signal.SIGKILL)
    trials = controller.wait(run.name, timeout=600)
    assert trials.outcome == "Complete", fake.logs
    controller.wait(f"{run.name}-study", timeout=120)
    assert len(controller.jobs[f"{run.name}-study"].pods) >= 2  # the study restarted on its file of the claim
    attempts = [p for p in trials.pods if p.index == killed.index]
    assert len(attempts) == 2 and attempts[0].exit_code != 0 and attempts[1].exit_code == 0
    assert f"slot {killed.index} restarted: trial " in log_of(fake, attempts[1], "trial")

    scope = find_scope("lr-sweep", TEAM)
    detail = show_sweep(scope)
    table = detail.table
    assert table is not None, detail.why
    assert len(table.rows) == 6 and table.finished  # the restarted trial counted once
    states = {row.params["lr"]: row.state for row in table.rows}
    assert states[1.0] == "failed"
    # that one only: a trial whose metric lines came while the study's pod restarted reported them once it answered
    (failed,) = [row for row in table.rows if row.state == "failed"]
    assert "exited with code" in failed.why
    assert table.best.params == {"lr": 0.001} and table.best.state == "complete"
    assert table.rows[0].best  # sorted by the metric, the best first
    assert table.rows[0].metric == pytest.approx(1 / STEPS, abs=1e-3)
    pruned = [row for row in table.rows if row.state == "pruned"]
    assert pruned, [(r.params, r.state, r.metric) for r in table.rows]
    assert all(row.params["lr"] in (1e-5, 1e-1, 1e-4, 1e-2) for row in pruned)
    judged = {}
    for row in pruned:  # stopped when the pruner said so
        log = trial_log(scope, str(row.number))
        assert log.text is not None, log.why
        decided = re.search(rf"trial {row.number} pruned at step (\d+)", log.text)
        assert decided, log.text
        judged[row.number] = int(decided.group(1))
        # the trial says the pruner's word, then signals the training: a step already under way may still print
        assert log.text[decided.end() :].count("score=") <= 2, log.text
    # The pruner needs a completed trial: one that runs beside the first ones may be judged only near its end (when
    # the trials before it were slow), but a hopeless trial started after one completed is judged at its first
    # report, whatever steps the others reported at and however loaded the machine (seed 3: trial 4, lr=1e-5,
    # starts after three ended: lr=1.0 failed, and of lr=1e-2 and lr=1e-1 the first to end completed)
    assert min(judged.values()) < STEPS // 2, judged
    best_log = trial_log(scope, "best").text
    assert best_log.count("score=") == STEPS
    assert (claims / run.name / "study.db").is_file()  # the study outlives its pod, on the claim
    assert (claims / run.name / f"trial-{table.best.number}").is_dir()  # each trial works in its own directory

    # what the command line shows: vdk show (text and JSON), vdk list
    shown = vdk("show", "-n", "lr-sweep", "-o", "json")
    assert shown.exit_code == 0, shown.output
    study = json.loads(shown.stdout)["sweep"]["study"]
    assert study["best_trial"] == table.best.number and len(study["table"]) == 6
    text = vdk("show", "-n", "lr-sweep")
    assert text.exit_code == 0, text.output
    assert "lr=0.001" in text.stdout and "best" in text.stdout and "pruned" in text.stdout
    listed = vdk("list", "-o", "json")
    entry = next(e for e in json.loads(listed.stdout) if e["job_name"] == "lr-sweep")
    assert entry["sweep"]["done"] + entry["sweep"]["pruned"] + entry["sweep"]["failed"] == 6
    assert entry["sweep"]["best_metric"] == pytest.approx(table.best.metric)
    logs = vdk("execute", "--logs", "-n", "lr-sweep", "--trial", "best")
    assert logs.exit_code == 0 and logs.stdout.count("score=") == STEPS, logs.output

    # the best trial as a full run on two nodes: a normal run of the same image, its record names the sweep
    started = start_trial(scope, "best", nodes=2)
    assert started.trial.params == {"lr": 0.001} and started.nodes == "2"
    main = client.get("Job", started.run_name)
    assert main is not None and "vdk.io/sweep" not in main["metadata"]["labels"]
    container = main["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][-2:] == ["--lr", "0.001"] and container["image"] == IMAGE.reference
    assert main["spec"]["completions"] == 2
    origin = json.loads(main["metadata"]["annotations"]["vdk.io/from-sweep"])
    assert origin == {"sweep": run.name, "trial": table.best.number, "params": {"lr": 0.001}}
    record = client.read_run_record(started.run_name)
    assert record.from_sweep["sweep"] == run.name and record.spec["sweep"] is None


def test_cancel_stops_every_trial_and_the_study(sweep_cluster):
    fake, client, job, controller, _ = sweep_cluster
    run, _ = deploy(client, job)
    controller.start()
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and sum(1 for r in controller.jobs.values() for p in r.pods) < 3:
        time.sleep(0.2)
    assert len(controller.running_processes()) >= 2  # the study and trials run
    cancelled = cancel_run(find_scope("lr-sweep", TEAM), run.name)
    assert f"Job/{run.name}" in cancelled.deleted
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and controller.running_processes():
        time.sleep(0.2)
    assert controller.running_processes() == []
    assert [k for k in fake.objects if k[1] in ("jobs", "services") and k[3].startswith(run.name)] == []
