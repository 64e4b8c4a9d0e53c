"""Claims are not versioned: each run's pods report a manifest of them (the data step's termination message; for a
TrainJob the first lines of its training container's log), which `vdk` reads back, keeps in the run's record
(so that it outlives the pods) and compares between runs. The real `kubernetes` client against the fake API
server; the manifest lines are the data step's own."""

from __future__ import annotations

import dataclasses
import json

from tests.support import cluster_state as cs
from tests.support.jobs import write_job
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from vdk.plugin.ml_training.datafetch.claim_manifest import claim_manifest
from vdk.plugin.ml_training.datafetch.data_pins import DataPin
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs.summary import summarize
from vdk.plugin.ml_training.ops.deploy_changes import run_state
from vdk.plugin.ml_training.ops.run_changes import changes_between


def deployed(client, spec, backend: str, name: str) -> dict:
    run = dataclasses.replace(make_run(spec, name=name), data=(DataPin("/data", "pvc:imagenet"),))
    return client.apply(render_run(spec, IMAGE, run, "ml", backend))[0]


def report(fake, run_obj: dict, backend: str, line: str) -> None:
    """What the kubelet keeps of a pod whose data step ended, with the manifest it printed."""
    pod = cs.rank_pod(run_obj, backend, 0, cs.running())
    if backend == "trainjob":
        fake.add("pods", pod)
        fake.set_log(pod["metadata"]["name"], "node", f"{line}\n[vdk-ml-training] progress step=1\n")
        return
    ended = {"exitCode": 0, "reason": "Completed", "message": line}
    pod["status"]["initContainerStatuses"] = [{"name": "vdk-data", "state": {"terminated": ended}}]
    fake.add("pods", pod)


def test_the_pods_manifest_of_a_claim_is_kept_in_the_record_and_compared(tmp_path, cluster):
    fake, client = cluster(pytorchjob=True, trainer_mechanism="runtimePatches")
    spec = load_job_spec(write_job(tmp_path, "vision", extra="[ml-training.mounts]\n/data = pvc:imagenet\n"))
    claim = tmp_path / "claim"
    claim.mkdir()
    (claim / "a.jpg").write_bytes(b"a")
    first = claim_manifest("/data", str(claim))

    run_a = deployed(client, spec, "pytorchjob", "vision-aaaaaaa1")
    report(fake, run_a, "pytorchjob", first.line())
    state_a = run_state(client, summarize(run_a))
    assert state_a.data[0].manifest == first.to_dict()
    record = next(c for c in fake.stored("configmaps") if c["metadata"]["name"] == "vision-aaaaaaa1-record")
    assert json.loads(record["data"]["data.json"])[0]["manifest"] == first.to_dict()  # kept in the record
    for pod in fake.stored("pods"):
        fake._delete(("v1", "pods", "ml", pod["metadata"]["name"]))
    assert run_state(client, summarize(run_a)).data[0].manifest == first.to_dict()  # the pods are gone: still known

    (claim / "b.jpg").write_bytes(b"b")  # someone wrote into the claim between the runs
    run_b = deployed(client, spec, "trainjob", "vision-bbbbbbb2")
    report(fake, run_b, "trainjob", claim_manifest("/data", str(claim)).line())
    state_b = run_state(client, summarize(run_b))
    assert state_b.data[0].manifest["files"] == 2
    (change,) = changes_between(state_a, state_b).data
    assert change.same is False and change.before.manifest["sha256"] == first.sha256
    assert "not versioned; manifest" in change.after.describe_version()


def test_a_claim_no_pod_reported_is_unknown(tmp_path, cluster):
    fake, client = cluster(pytorchjob=True)
    spec = load_job_spec(write_job(tmp_path, "vision", extra="[ml-training.mounts]\n/data = pvc:imagenet\n"))
    state = run_state(client, summarize(deployed(client, spec, "pytorchjob", "vision-ccccccc1")))
    other = run_state(client, summarize(deployed(client, spec, "pytorchjob", "vision-ccccccc2")))
    diff = changes_between(state, other)
    assert diff.data[0].same is None and diff.changed
    assert "data /data: pvc:imagenet is not versioned, and no manifest of it is known for both runs" in diff.unknown
