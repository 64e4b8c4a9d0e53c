"""Pod pieces every backend shares: resources, volumes (/dev/shm, the run's outputs, datasets), environment
(with Secret references), the command, and where the pods go (k8s/placement.py: node selection, tolerations,
pull secrets, service account)."""

from __future__ import annotations

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.k8s import placement
from vdk.plugin.ml_training.k8s.runs.identity import KUEUE_QUEUE_LABEL
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.k8s.storage import data_volumes
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.mlflow_runs import PREFIX as MLFLOW_PREFIX
from vdk.plugin.ml_training.runtime.mlflow_runs import TRACKING_URI

# Nodes pull multi-GB images at different speeds; torch's defaults (600 s to rendezvous, 60 s per
# store read) fail jobs whose last node is still pulling. Half an hour covers a cold pull.
RENDEZVOUS_TIMEOUT_SECONDS = 1800
STORE_READ_TIMEOUT_SECONDS = 300
RENDEZVOUS_PORT = 29500

SHM_VOLUME = "dshm"
SHM_PATH = "/dev/shm"
OUTPUT_VOLUME = "vdk-outputs"
# torchrun's agent: how long it waits for its ranks after passing SIGTERM on, before it kills them (an older torch
# that does not read it keeps its 30 s).
TORCHRUN_SHUTDOWN_TIMEOUT = "TORCH_ELASTIC_SHUTDOWN_TIMEOUT"
AGENT_EXIT_SECONDS = 5  # of the grace period, what the agent keeps to end after its ranks


def torchrun_flags() -> list[str]:
    """Flags for torch's launcher on a cluster. Everything else (nodes, rank, master) comes from
    the PET_* variables that the operator (or the Indexed Job renderer) sets."""
    conf = (
        f"timeout={RENDEZVOUS_TIMEOUT_SECONDS},"  # static rendezvous (fixed-size jobs)
        f"join_timeout={RENDEZVOUS_TIMEOUT_SECONDS},"  # c10d rendezvous (elastic jobs)
        f"read_timeout={STORE_READ_TIMEOUT_SECONDS}"
    )
    return [f"--rdzv-conf={conf}"]


def literal(text: str) -> str:
    """`text` as a container must receive it. Kubernetes expands `$(VAR)` in a container's command, args and
    env values, and turns `$$` into `$`; no local run, container run or image does. Every `$` doubled, the
    container gets `text` itself, on every backend: what the smoke run passed is what the cluster runs."""
    return text.replace("$", "$$")


def command(spec: MLJobSpec, python: str) -> list[str]:
    """The training container's command, passed literally (`literal`)."""
    return [literal(part) for part in layout.launch_command(spec, python, torchrun_flags())]


def resources(spec: MLJobSpec) -> dict:
    """Requests cpu/memory; limits memory (so /dev/shm cannot push a node into OOM) and GPUs.
    No CPU limit: throttling a data loader costs more than it protects."""
    requests = {"cpu": spec.cpu, "memory": spec.memory}
    limits = {"memory": spec.memory}
    gpu = spec.gpus_per_node.resource_name
    if gpu:
        count = str(spec.gpus_per_node.devices if spec.gpus_per_node.mig_profile else spec.gpus_per_node.count)
        requests[gpu] = count
        limits[gpu] = count
    return {"requests": requests, "limits": limits}


def shm_volume(spec: MLJobSpec) -> dict:
    """A memory-backed /dev/shm: DataLoader workers and NCCL fail with the runtime's 64 MB default."""
    return {"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": spec.shm_size}}


def shm_mount() -> dict:
    return {"name": SHM_VOLUME, "mountPath": SHM_PATH}


def placement_fields(spec: MLJobSpec) -> dict:
    """The pod spec's fields that say where it goes: nodeSelector, affinity, tolerations (GPU nodes' taint when
    the job asks for GPUs, and the job's own), imagePullSecrets, serviceAccountName; only those that apply."""
    return placement.pod_fields(spec)


def env(spec: MLJobSpec, run: RunInfo) -> list[dict]:
    """[ml-training.env] plus what the image layout needs and the stall watchdog's timeouts
    (layout.launch_env), the run's output directory, and [ml-training.secrets] as references to their
    Secrets (the values never pass through here), as a container's env. Values are passed literally
    (`literal`: Kubernetes would expand `$(VAR)` in them)."""
    out: list[dict] = [{"name": name, "value": literal(value)} for name, value in layout.launch_env(spec).items()]
    if spec.mlflow_tracking_uri and TRACKING_URI not in spec.env_dict:  # the cluster's; the job's own wins
        out.append({"name": TRACKING_URI, "value": literal(spec.mlflow_tracking_uri)})
    if spec.output_pvc:
        out.append({"name": protocol.OUTPUT_DIR, "value": layout.OUTPUT_DIR})
    out += [{"name": name, "value": value} for name, value in resume_env(spec, run).items()]
    for secret in spec.secrets:
        out.append({"name": secret.name, "valueFrom": {"secretKeyRef": {"name": secret.secret, "key": secret.key}}})
    return out


def resume_env(spec: MLJobSpec, run: RunInfo) -> dict[str, str]:
    """What automatic resume and the checkpoint on the way out need (runtime/resume.py): the job's `resume`, the run
    whose checkpoints the pods may resume from (a restarted pod is the same run), and, with a grace period, torchrun's
    agent waits for its ranks to save that long (less the few seconds it needs to end) before it kills them (torch's
    default, 30 s, would cut a longer save short)."""
    env = {protocol.RESUME: spec.resume, protocol.RUN_NAME: run.name}
    env[protocol.MAX_STARTS] = str(1 + spec.max_restarts + spec.max_disruptions)
    grace = spec.termination_grace_period_seconds
    if grace:
        env[TORCHRUN_SHUTDOWN_TIMEOUT] = str(max(1, grace - AGENT_EXIT_SECONDS))
    return env


def grace_fields(spec: MLJobSpec) -> dict:
    """The pod spec's terminationGracePeriodSeconds, when the job has one (`termination_grace_period`, or its default
    with an output volume)."""
    grace = spec.termination_grace_period_seconds
    return {"terminationGracePeriodSeconds": grace} if grace else {}


def mlflow_env(spec: MLJobSpec) -> list[dict]:
    """MLflow's variables of the job's [ml-training.env] (its tracking server, experiment, credentials), else the
    cluster's tracking server (`mlflow_tracking_uri`): for a pod that is no training container (a sweep's study)."""
    out = [{"name": k, "value": literal(v)} for k, v in spec.env if k.startswith(MLFLOW_PREFIX)]
    if spec.mlflow_tracking_uri and TRACKING_URI not in spec.env_dict:
        out.append({"name": TRACKING_URI, "value": literal(spec.mlflow_tracking_uri)})
    return out


def facts(spec: MLJobSpec, image: layout.JobImage, run: RunInfo) -> list[dict]:
    """The run's facts for its series' viewers (runtime/series.py): the run's name, its image, the commit it was
    deployed from, its datasets' pinned versions."""
    pins = {pin.target: pin.version or pin.fingerprint or pin.source for pin in run.data}
    provenance = run.provenance
    values = layout.facts_env(spec, run.name, image.reference, provenance.git_commit, provenance.git_dirty, pins)
    return [{"name": name, "value": literal(value)} for name, value in values.items()]


def volumes(spec: MLJobSpec) -> list[dict]:
    """/dev/shm, the output claim (its run directory is mounted), the datasets' claims (read-only), the data cache
    (k8s/storage/data_volumes.py)."""
    out = [shm_volume(spec)]
    if spec.output_pvc:
        out.append({"name": OUTPUT_VOLUME, "persistentVolumeClaim": {"claimName": spec.output_pvc}})
    for i, mount in enumerate(spec.mounts):
        claim = {"claimName": mount.claim, "readOnly": True}
        out.append({"name": f"{data_volumes.MOUNT_VOLUME_PREFIX}{i}", "persistentVolumeClaim": claim})
    return out + data_volumes.volumes(spec)


def volume_mounts(spec: MLJobSpec, run: RunInfo, linked: bool = False) -> list[dict]:
    """The training container's mounts: the run's own directory of the output claim (the kubelet makes it),
    which the bootstrap makes the working directory, and each dataset at its path (those of [ml-training.data]:
    k8s/storage/data_volumes.py)."""
    out = [shm_mount()]
    if spec.output_pvc:
        out.append({"name": OUTPUT_VOLUME, "mountPath": layout.OUTPUT_DIR, "subPath": run.name})
    for i, mount in enumerate(spec.mounts):
        entry = {"name": f"{data_volumes.MOUNT_VOLUME_PREFIX}{i}", "mountPath": mount.path, "readOnly": True}
        if mount.sub_path:
            entry["subPath"] = mount.sub_path
        out.append(entry)
    return out + data_volumes.training_mounts(spec, run, linked)


def container(
    spec: MLJobSpec, image: layout.JobImage, name: str, run: RunInfo, extra_env: list[dict] | None = None
) -> dict:
    """The training container; `extra_env` holds backend-specific launcher variables."""
    return {
        "name": name,
        "image": image.reference,
        "imagePullPolicy": "IfNotPresent",  # images are pinned by digest
        "command": command(spec, image.python),
        "workingDir": layout.JOB_DIR,
        "env": env(spec, run) + facts(spec, image, run) + list(extra_env or []),
        "resources": resources(spec),
        "volumeMounts": volume_mounts(spec, run),
    }


def init_containers(spec: MLJobSpec, image: layout.JobImage, run: RunInfo) -> list[dict]:
    """The data step (k8s/storage/data_volumes.py), for a job with datasets."""
    if not data_volumes.has_data_step(spec):
        return []
    return [data_volumes.init_container(spec, image, run, env(spec, run), resources(spec))]


def pod_spec(
    spec: MLJobSpec, containers: list[dict], restart_policy: str | None = None, init: list[dict] | None = None
) -> dict:
    out: dict = {}
    if restart_policy:
        out["restartPolicy"] = restart_policy
    if init:
        out["initContainers"] = init
    out["containers"] = containers
    out["volumes"] = volumes(spec)
    out.update(placement_fields(spec))
    out.update(grace_fields(spec))
    if spec.priority_class:
        out["priorityClassName"] = spec.priority_class
    return out


def object_metadata(spec: MLJobSpec, run: RunInfo, image: str, namespace: str, labels: dict[str, str]) -> dict:
    """Metadata of a run's main object: its name, the run's labels plus Kueue's queue label, and
    the audit trail as annotations."""
    object_labels = dict(labels)
    if spec.queue:
        object_labels[KUEUE_QUEUE_LABEL] = spec.queue
    return {
        "name": run.name,
        "namespace": namespace,
        "labels": object_labels,
        "annotations": run.annotations(image),
    }
