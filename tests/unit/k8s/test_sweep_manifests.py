"""A sweep rendered for Kubernetes: the trials' Indexed Job (parallelism = parallel, completions = trials, the
team's queue, one node per trial), the study's Job and Service on the output claim, the record; every object
valid as the API server checks it (the `kubernetes` models plus its rules), as today's runs are."""

import json
from datetime import datetime
from datetime import timezone

import pytest

from tests.support.jobs import write_job
from tests.support.local_cluster import expand
from tests.support.native import native_errors
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s import gpu_hours
from vdk.plugin.ml_training.k8s import sweep_manifests
from vdk.plugin.ml_training.k8s.manifests import limitations
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs.identity import ANNOTATION_SWEEP
from vdk.plugin.ml_training.k8s.runs.summary import summarize
from vdk.plugin.ml_training.runtime import sweep_protocol as wire

MODELS = {"Job": "V1Job", "Service": "V1Service", "ConfigMap": "V1ConfigMap"}
SWEEP = """
[ml-training.sweep]
lr = loguniform(1e-5, 1e-2)
batch_size = 16, 32
trials = 24
parallel = 6
metric = eval_loss
"""


def sweep_spec(tmp_path, **keys):
    ml = {
        "args": "--lr ${lr} --batch-size ${batch_size}",
        "gpus_per_node": "1g.10gb",
        "output_pvc": "ml-outputs",
        "queue": "vision-gpus",
        **keys,
    }
    ml = {k: v for k, v in ml.items() if v is not None}
    return load_job_spec(write_job(tmp_path, "hp", ml=ml, env={"BATCH": "${batch_size}"}, team="vision", extra=SWEEP))


def test_a_sweep_renders_valid_objects_the_trials_job_first(tmp_path):
    spec = sweep_spec(tmp_path)
    run = make_run(spec)
    manifests = render_run(spec, IMAGE, run, "ml", "pytorchjob")  # a sweep's trials are an Indexed Job whatever
    assert [(m["kind"], m["metadata"]["name"]) for m in manifests] == [
        ("Job", run.name),
        ("Job", f"{run.name}-study"),
        ("Service", f"{run.name}-study"),
        ("ConfigMap", f"{run.name}-record"),
    ]
    for manifest in manifests:
        assert native_errors(manifest, MODELS[manifest["kind"]]) == [], manifest["metadata"]["name"]


def test_the_trials_run_parallel_at_a_time_one_node_each_in_the_teams_queue(tmp_path):
    spec = sweep_spec(tmp_path, nodes="4", procs_per_node="2")
    run = make_run(spec)
    trials = render_run(spec, IMAGE, run, "ml", "job")[0]
    labels = trials["metadata"]["labels"]
    assert labels["kueue.x-k8s.io/queue-name"] == "vision-gpus"
    assert labels["vdk.io/backend"] == "job" and labels["vdk.io/run"] == run.name and labels["vdk.io/sweep"] == "true"
    job = trials["spec"]
    assert (job["completionMode"], job["completions"], job["parallelism"]) == ("Indexed", 24, 6)
    container = job["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE.reference
    # what the container receives, after the kubelet's `$(VAR)` expansion: `$` is passed literally
    command = [expand(part, {}) for part in container["command"]]
    env = {e["name"]: expand(e["value"], {}) for e in container["env"] if "value" in e}
    assert command[:4] == ["python", "-m", sweep_manifests.TRIAL_MODULE, "--"]
    assert "--nnodes=1" in command and "--nproc-per-node=2" in command
    assert command[-4:] == ["--lr", "${lr}", "--batch-size", "${batch_size}"]
    assert env["BATCH"] == "${batch_size}"  # substituted by the trial's worker
    assert env[wire.STUDY_ADDRESS] == f"{run.name}-study:{sweep_manifests.STUDY_PORT}"
    assert wire.Sweep.from_json(env[wire.SPEC]).study == run.name
    assert container["resources"]["limits"]["nvidia.com/mig-1g.10gb"] == "1"
    stop = job["podFailurePolicy"]["rules"][0]
    assert stop["action"] == "FailJob" and stop["onExitCodes"]["values"] == [wire.STOP_EXIT_CODE]
    assert json.loads(trials["metadata"]["annotations"][ANNOTATION_SWEEP])["metric"] == "eval_loss"
    assert any("one node" in note for note in limitations(spec, "job"))


def test_the_study_keeps_its_file_on_the_runs_directory_of_the_claim(tmp_path):
    spec = sweep_spec(tmp_path)
    run = make_run(spec)
    _, study, service, record = render_run(spec, IMAGE, run, "ml", "job")
    assert "vdk.io/run" not in study["metadata"]["labels"]  # it is no run of the job
    pod = study["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "OnFailure"
    assert pod["volumes"][0]["persistentVolumeClaim"]["claimName"] == "ml-outputs"
    mount = pod["containers"][0]["volumeMounts"][0]
    assert mount["subPath"] == run.name and mount["mountPath"] == "/opt/vdk-ml/outputs"
    assert "sqlite:////opt/vdk-ml/outputs/study.db" in pod["containers"][0]["command"]
    assert "nvidia.com/gpu" not in json.dumps(pod)  # no GPU for the study
    assert service["spec"]["selector"] == {sweep_manifests.LABEL_STUDY_OF: run.name}
    assert json.loads(record["data"]["spec.json"])["sweep"]["trials"] == 24


def test_a_sweep_without_an_output_claim_is_refused_with_the_fix(tmp_path):
    spec = sweep_spec(tmp_path, output_pvc=None)
    with pytest.raises(MLTrainingError) as info:
        render_run(spec, IMAGE, make_run(spec), "ml", "job")
    assert "output_pvc" in info.value.fix


def test_vdk_list_usage_counts_a_sweeps_gpu_hours_under_its_job(tmp_path):
    """The trials Job is the sweep's run: `parallel` one-node pods of `1g.10gb` (1/7 of a GPU each) held for the
    sweep's duration, under the job's name and team; the study's Job holds no GPU and is no run."""
    spec = sweep_spec(tmp_path)
    run = make_run(spec)
    trials, study, *_ = render_run(spec, IMAGE, run, "ml", "job")
    trials["status"] = {
        "startTime": "2026-01-01T10:00:00Z",
        "completionTime": "2026-01-01T12:00:00Z",
        "succeeded": 24,
        "conditions": [{"type": "Complete", "status": "True", "lastTransitionTime": "2026-01-01T12:00:00Z"}],
    }
    now = datetime(2026, 1, 1, 13, tzinfo=timezone.utc)
    usage = gpu_hours.report([summarize(trials)], [], [], now)
    [(team, job, totals, runs)] = usage.by_job()
    assert (team, job, [u.run for u in runs]) == ("vision", "hp", [run.name])
    assert totals.gpu_hours == pytest.approx(6 * (1 / 7) * 2)
    assert runs[0].outcome == gpu_hours.SUCCEEDED and totals.wasted == 0
    assert "vdk.io/run" not in study["metadata"]["labels"]  # not listed among the runs, so not counted
