"""Job specs for the Kubernetes tests: real job directories parsed by `load_job_spec`."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.backends import Discovery
from vdk.plugin.ml_training.k8s.backends.trainjob import TrainerFacts
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.source.audit import Provenance

# The image manifests run: its reference, and the interpreter its base has (a well-known base's `python`).
IMAGE = JobImage("registry.example.com/ml/mnist-ddp@sha256:" + "ab" * 32, "python")
PROVENANCE = Provenance(
    git_commit="0123456789abcdef0123456789abcdef01234567",
    git_dirty=True,
    git_diff_sha256="d" * 64,
    git_remote="https://git.example.com/ml/models.git",
    deployer="ada@example.com",
    created="2026-01-02T03:04:05Z",
)

# The matrix of issue 3: [ml-training] settings per case.
MATRIX = {
    "cpu-1-node": {"nodes": "1", "gpus_per_node": "0", "cpu": "2", "memory": "8Gi"},
    "gpu-1x8": {"nodes": "1", "gpus_per_node": "8"},
    "gpu-4x8": {"nodes": "4", "gpus_per_node": "8", "memory": "512Gi", "shm_size": "64Gi"},
    "elastic-2-8": {"nodes": "2:8", "gpus_per_node": "8"},
    "mig": {"nodes": "2", "gpus_per_node": "1g.10gb"},
    "queue-priority": {
        "nodes": "2",
        "gpus_per_node": "1",
        "queue": "team-a-queue",
        "priority_class": "high-priority",
        "max_runtime": "12h",
        "max_restarts": "5",
        "ttl_after_finished": "1d",
        "termination_grace_period": "5m",  # terminationGracePeriodSeconds where a backend takes it
    },
    # every placement key: a GPU model, node labels, taints, pull secrets, a service account
    "placement": {
        "nodes": "2",
        "gpus_per_node": "8",
        "gpu_type": "H100",
        "node_selector": "pool=training, topology.kubernetes.io/zone=eu-west-1a",
        "tolerations": "dedicated=ml:NoSchedule, spot, example.com/maintenance=:NoExecute",
        "image_pull_secrets": "registry-credentials, mirror-credentials",
        "service_account": "trainer",
    },
}


def make_spec(
    root: Path,
    name: str = "mnist-ddp",
    env: dict | None = None,
    args: str | None = None,
    team: str | None = "Vision Research",
    settings: dict | None = None,
    **keys: str,
) -> MLJobSpec:
    """The spec of job `name` in `root/name` with [ml-training] `keys`, of `team` (None: no [owner] team),
    read with VDK `settings` (keyed as in [ml-training], like `settings.job_settings`)."""
    ml = {**keys, **({"args": args} if args else {})}
    return load_job_spec(write_job(root, name, ml=ml, env=env or None, team=team), settings)


# A job deployed from a directory that is not in a git repository.
OUTSIDE_GIT = dataclasses.replace(PROVENANCE, git_commit=None, git_dirty=False, git_diff_sha256=None, git_remote=None)


def make_run(
    spec: MLJobSpec,
    name: str | None = None,
    reason: str | None = "nightly retrain",
    provenance: Provenance = PROVENANCE,
) -> RunInfo:
    return RunInfo.create(spec, provenance, reason=reason, image_digest=IMAGE.reference.split("@")[1], name=name)


def trainer_cluster(mechanism: str) -> Discovery:
    """What discovery finds of a cluster whose Trainer changes pods through `mechanism`."""
    return Discovery(resources=frozenset(), facts={"trainjob": TrainerFacts(mechanism=mechanism)})
