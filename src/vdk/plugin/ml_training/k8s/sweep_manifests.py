"""A hyperparameter sweep rendered for Kubernetes, on its own engines: no controller of ours.

- The trials: one Indexed Job (`<run>`, the run's main object, labelled like a run of the `job` backend and
  queued in the team's Kueue queue like any run) with `completions = trials` and `parallelism = parallel`. Each
  pod is one slot (runtime/sweep_trial.py): it asks the study for its trial, runs the job's own launch command
  on one node with the trial's values, reports the metric and ends well whether the trial completed, was
  pruned or failed. The same image for every trial. A slot that exits with sweep_protocol.STOP_EXIT_CODE (the
  first trials all failed) fails the Job at once; a pod lost or killed is replaced and runs its trial again.
- The study: Optuna's gRPC storage proxy in one small pod (a Job `<run>-study`, restarted on failure) over an
  SQLite file in the run's directory of the output claim, so that the search survives the laptop closing, a
  trial pod's restart and the study pod's restart; a Service `<run>-study` for the trial pods to reach it.
- The run record, as for every run.

Every object after the first is owned by the trials Job (the client makes it so): deleting the run, or its TTL,
removes the study with it; the study's file stays on the claim, as every run's outputs do.
"""

from __future__ import annotations

import json

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.k8s import pod_template
from vdk.plugin.ml_training.k8s.backends.base import DISRUPTION_TARGET
from vdk.plugin.ml_training.k8s.resources import JOB
from vdk.plugin.ml_training.k8s.resources import SERVICE
from vdk.plugin.ml_training.k8s.runs.identity import ANNOTATION_SWEEP
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_JOB
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_MANAGED_BY
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_RUN
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_SWEEP
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_TEAM
from vdk.plugin.ml_training.k8s.runs.identity import MANAGED_BY
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.runtime import sweep_protocol as wire
from vdk.plugin.ml_training.vocabulary.human_units import counted

BACKEND = "job"  # a sweep's trials are an Indexed Job: listed, observed and deleted as a run of that backend
TRIAL_CONTAINER = "trial"
STUDY_CONTAINER = "study"
STUDY_PORT = 50051
STUDY_FILE = "study.db"
TRIAL_MODULE = "vdk.plugin.ml_training.runtime.sweep_trial"
SERVER_MODULE = "vdk.plugin.ml_training.runtime.sweep_server"
LABEL_STUDY_OF = "vdk.io/study-of"  # on the study's Job and pod: the sweep it serves (it is no run)
STUDY_RESOURCES = {"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}}
STUDY_RESTARTS = 20


def study_name(run_name: str) -> str:
    return f"{run_name}-study"


def study_address(run_name: str) -> str:
    return f"{study_name(run_name)}:{STUDY_PORT}"


def check(spec: MLJobSpec) -> None:
    """What a sweep on the cluster needs of its job: an output claim for the study's file."""
    if spec.sweep is not None and not spec.output_pvc:
        raise MLTrainingError(
            f"{spec.name} has a sweep, whose study must outlive its pods: it is kept on the output claim, and none "
            "is set",
            f"set `output_pvc = CLAIM` in [ml-training] of {spec.config_path} (or {variable('output_pvc')}), a "
            "ReadWriteMany PersistentVolumeClaim of the namespace (see docs/sweeps.md)",
        )


def trial_command(spec: MLJobSpec, python: str) -> list[str]:
    """A slot's command: the worker, then the job's launch command on one node (`${name}` still in it), passed
    literally as every container's command is (pod_template.literal)."""
    flags = ["--standalone", "--nnodes=1", f"--nproc-per-node={spec.procs_per_node}"]
    parts = [python, "-m", TRIAL_MODULE, "--", *layout.launch_command(spec, python, flags)]
    return [pod_template.literal(part) for part in parts]


def render(spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str) -> list[dict]:
    """The trials Job (main object), the study's Job and Service: in the order to create them."""
    check(spec)
    sweep = spec.sweep
    assert sweep is not None
    labels = {**run.labels(BACKEND), LABEL_SWEEP: "true"}
    wire_spec = sweep.to_wire(study=run.name).to_json()
    sweep_env = [{"name": wire.SPEC, "value": pod_template.literal(wire_spec)}]
    trial_env = [*sweep_env, {"name": wire.STUDY_ADDRESS, "value": study_address(run.name)}]
    if spec.max_runtime_seconds:
        trial_env.append({"name": wire.TRIAL_SECONDS, "value": str(spec.max_runtime_seconds)})
    container = pod_template.container(spec, image, TRIAL_CONTAINER, run, trial_env)
    container["command"] = trial_command(spec, image.python)
    job_spec = {
        "completionMode": "Indexed",
        "completions": sweep.trials,
        "parallelism": sweep.parallel,
        # A slot whose worker crashed (not its training: a failed trial ends well) is replaced and resumes its
        # trial; evictions and preemptions do not count.
        "backoffLimit": max(spec.max_restarts, 1) * sweep.parallel,
        "podFailurePolicy": {
            "rules": [
                {
                    "action": "FailJob",
                    "onExitCodes": {
                        "containerName": TRIAL_CONTAINER,
                        "operator": "In",
                        "values": [wire.STOP_EXIT_CODE],
                    },
                },
                {"action": "Ignore", "onPodConditions": [{"type": DISRUPTION_TARGET}]},
            ]
        },
        "ttlSecondsAfterFinished": spec.ttl_after_finished_seconds,
        "template": {
            "metadata": {"labels": dict(labels)},
            "spec": pod_template.pod_spec(spec, [container], restart_policy="Never"),
        },
    }
    metadata = pod_template.object_metadata(spec, run, image.reference, namespace, labels)
    metadata["annotations"][ANNOTATION_SWEEP] = json.dumps(
        {"trials": sweep.trials, "parallel": sweep.parallel, "metric": sweep.metric, "goal": sweep.goal},
        sort_keys=True,
    )
    trials = {"apiVersion": JOB.api_version, "kind": JOB.kind, "metadata": metadata, "spec": job_spec}
    return [trials, *_study(spec, image, run, namespace, sweep_env)]


def _study(spec: MLJobSpec, image: JobImage, run: RunInfo, namespace: str, sweep_env: list[dict]) -> list[dict]:
    name = study_name(run.name)
    labels = {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: run.job_name, LABEL_STUDY_OF: run.name, LABEL_SWEEP: "true"}
    if LABEL_TEAM in run.labels(BACKEND):
        labels[LABEL_TEAM] = run.labels(BACKEND)[LABEL_TEAM]
    storage = f"sqlite:///{layout.OUTPUT_DIR}/{STUDY_FILE}"
    container = {
        "name": STUDY_CONTAINER,
        "image": image.reference,
        "imagePullPolicy": "IfNotPresent",
        "command": [image.python, "-m", SERVER_MODULE, "--storage", storage, "--port", str(STUDY_PORT)],
        "workingDir": layout.JOB_DIR,
        "env": [
            {"name": "PYTHONPATH", "value": layout.PYTHONPATH},
            {"name": "PYTHONUNBUFFERED", "value": "1"},
            *sweep_env,
            *pod_template.mlflow_env(spec),  # the sweep's MLflow run, its trials' parent (runtime/sweep_server.py)
            *pod_template.facts(spec, image, run),
        ],
        "ports": [{"name": "study", "containerPort": STUDY_PORT, "protocol": "TCP"}],
        "resources": STUDY_RESOURCES,
        "volumeMounts": [
            {"name": pod_template.OUTPUT_VOLUME, "mountPath": layout.OUTPUT_DIR, "subPath": run.name},
        ],
    }
    pod_spec: dict = {
        "restartPolicy": "OnFailure",  # the same pod, its file on the claim: the study goes on
        "containers": [container],
        "volumes": [{"name": pod_template.OUTPUT_VOLUME, "persistentVolumeClaim": {"claimName": spec.output_pvc}}],
    }
    if spec.priority_class:
        pod_spec["priorityClassName"] = spec.priority_class
    job = {
        "apiVersion": JOB.api_version,
        "kind": JOB.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": dict(labels)},
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": STUDY_RESTARTS,
            "ttlSecondsAfterFinished": spec.ttl_after_finished_seconds,
            "template": {"metadata": {"labels": dict(labels)}, "spec": pod_spec},
        },
    }
    service = {
        "apiVersion": SERVICE.api_version,
        "kind": SERVICE.kind,
        "metadata": {"name": name, "namespace": namespace, "labels": {**labels, LABEL_RUN: run.name}},
        "spec": {
            "selector": {LABEL_STUDY_OF: run.name},
            "ports": [{"name": "study", "port": STUDY_PORT, "targetPort": STUDY_PORT, "protocol": "TCP"}],
        },
    }
    return [job, service]


def limitations(spec: MLJobSpec) -> list[str]:
    """What of the job a sweep on the cluster does differently, for the deploy to say."""
    notes = []
    if spec.nodes.max > 1:
        notes.append(
            f"each trial runs on one node ({counted(spec.procs_per_node, 'process')}); nodes = {spec.nodes} is for "
            "the full run of the best trial (`vdk execute --start -n JOB --trial best`)"
        )
    return notes


def study_selector(run_name: str) -> str:
    """Label selector of a sweep's study pod."""
    return f"{LABEL_STUDY_OF}={run_name}"
