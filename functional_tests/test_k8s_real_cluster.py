"""End to end against a real cluster (kind + the Kubeflow Training Operator), when one is given.

    VDK_ML_TRAINING_E2E_KUBECONFIG  kubeconfig of the cluster (required; the test is skipped without it)
    VDK_ML_TRAINING_E2E_IMAGE       a job image built from the job below by the plugin's image builder
                                    and pushed where the cluster pulls from (required)
    VDK_ML_TRAINING_E2E_JOB         the job directory that image was built from [examples/ddp-nccl]
    VDK_ML_TRAINING_E2E_NAMESPACE   namespace to run in [default]
    VDK_ML_TRAINING_E2E_TIMEOUT     seconds to wait for each run [900]

For every backend the cluster serves (always `job`; `pytorchjob` with the Training Operator;
`trainjob` with Trainer v2 and its torch-distributed runtime) it deploys the job on 2 CPU nodes,
waits until the run succeeds, reads the run record and what `vdk show` / `vdk execute --logs` show
(every rank finished, with a log), deletes the run and checks nothing is left.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from vdk.plugin.ml_training.image.base_manifest import resolve_base
from vdk.plugin.ml_training.image.registry import RegistryClient
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job.image_reference import parse_reference
from vdk.plugin.ml_training.k8s.backends import choose_backend
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs.identity import RunInfo
from vdk.plugin.ml_training.k8s.runs.observe import inspect_run
from vdk.plugin.ml_training.k8s.runs.observe import rank_logs
from vdk.plugin.ml_training.k8s.runs.summary import FAILED
from vdk.plugin.ml_training.k8s.runs.summary import SUCCEEDED
from vdk.plugin.ml_training.layout import JobImage
from vdk.plugin.ml_training.source import audit

PROJECT = Path(__file__).resolve().parents[1]
KUBECONFIG = os.environ.get("VDK_ML_TRAINING_E2E_KUBECONFIG")
IMAGE = os.environ.get("VDK_ML_TRAINING_E2E_IMAGE")
JOB_DIR = Path(os.environ.get("VDK_ML_TRAINING_E2E_JOB") or PROJECT / "examples" / "ddp-nccl")
NAMESPACE = os.environ.get("VDK_ML_TRAINING_E2E_NAMESPACE", "default")
TIMEOUT = int(os.environ.get("VDK_ML_TRAINING_E2E_TIMEOUT", "900"))

HOW_TO = "docs/contributing.md > Against a real cluster"
pytestmark = [
    pytest.mark.skipif(
        not KUBECONFIG,
        reason="no real cluster: set VDK_ML_TRAINING_E2E_KUBECONFIG to the kubeconfig of a cluster (kind, optionally "
        "with the Kubeflow Training Operator) and VDK_ML_TRAINING_E2E_IMAGE to a job image it can pull "
        f"(`vdk deploy -p examples/ddp-nccl --build-only` prints one); {HOW_TO}",
    ),
    pytest.mark.skipif(
        not IMAGE,
        reason="set VDK_ML_TRAINING_E2E_IMAGE to a job image the cluster can pull "
        f"(`vdk deploy -p examples/ddp-nccl --build-only` prints one); {HOW_TO}",
    ),
]


def _job_image() -> JobImage:
    """The image, and the interpreter its command starts (the first word of its config's Cmd)."""
    ref = parse_reference(IMAGE)
    with RegistryClient(ref.registry) as registry:
        return JobImage(IMAGE, resolve_base(registry, ref).config["config"]["Cmd"][0])


@pytest.fixture(scope="module")
def client():
    return KubeClient(namespace=NAMESPACE, config_file=KUBECONFIG)


@pytest.fixture(scope="module")
def spec(tmp_path_factory):
    if not (JOB_DIR / "config.ini").is_file():
        pytest.skip(f"no job at {JOB_DIR}: set VDK_ML_TRAINING_E2E_JOB to the job the image was built from")
    spec = load_job_spec(JOB_DIR)
    # Small enough for a kind node: 2 nodes x 1 CPU process, no GPU.
    import dataclasses

    return dataclasses.replace(
        spec,
        nodes=type(spec.nodes)(2, 2),
        gpus_per_node=type(spec.gpus_per_node)(0),
        procs_per_node=1,
        cpu="500m",
        memory="2Gi",
        shm_size="256Mi",
        ttl_after_finished_seconds=600,
        max_restarts=0,
    )


@pytest.mark.parametrize("backend", ["job", "pytorchjob", "trainjob"])
def test_deploy_run_and_delete(client, spec, backend):
    discovery = client.discover()
    try:
        choose_backend(discovery, backend)
    except Exception as e:  # noqa: BLE001 - the cluster does not serve this backend
        pytest.skip(f"{backend}: {e}")
    run = RunInfo.create(spec, audit.collect(spec.job_dir), reason=f"functional test ({backend})")
    manifests = render_run(spec, _job_image(), run, client.namespace, backend, cluster=discovery)
    created = client.apply(manifests)
    try:
        assert [o["kind"] for o in created] == [m["kind"] for m in manifests]
        phase = _wait(client, run.name)
        assert phase == SUCCEEDED, (
            f"run {run.name} ended {phase}: kubectl -n {client.namespace} describe {created[0]['kind']} {run.name}"
        )
        record = client.read_run_record(run.name)
        assert record.image == IMAGE and record.backend == backend
        # what `vdk show` and `vdk execute --logs` read: every rank finished, and each has a log
        summary = next(r for r in client.list_runs(job_name=spec.name) if r.name == run.name)
        detail = inspect_run(client, summary)
        assert [r.rank for r in detail.ranks if r.index is not None] == ["0", "1"], detail.to_dict()
        assert not [f for f in detail.findings if f.kind == "failed"], detail.to_dict()
        logs = list(rank_logs(client, summary))
        assert all(entry.current for entry in logs if entry.rank.index is not None), [e.to_dict() for e in logs]
    finally:
        client.delete_run(run.name)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and [r for r in client.list_runs() if r.name == run.name]:
        time.sleep(2)
    assert not [r for r in client.list_runs() if r.name == run.name]


def _wait(client: KubeClient, run_name: str) -> str:
    deadline = time.monotonic() + TIMEOUT
    phase = None
    while time.monotonic() < deadline:
        phase = next(r.phase for r in client.list_runs() if r.name == run_name)
        if phase in (SUCCEEDED, FAILED):
            return phase
        time.sleep(5)
    return f"still {phase} after {TIMEOUT}s"
