"""Runs Kueue holds: from its Workload, or from Kueue's events when Workloads cannot be read."""

from tests.support import cluster_state as cs
from tests.support.rendered_runs import run_object
from vdk.plugin.ml_training.k8s.runs import cluster_evidence as run_evidence
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.k8s.runs import summary as run_summary
from vdk.plugin.ml_training.k8s.runs.summary import summarize


def test_kueue_admission_is_explained_from_the_workload(tmp_path):
    obj = run_object(tmp_path, "pytorchjob", queue="team-a-queue")
    obj["status"] = {"conditions": [{"type": "Suspended", "status": "True", "message": "PyTorchJob is suspended"}]}
    run = summarize(obj)
    assert run.phase == run_summary.QUEUED and run.queue == "team-a-queue"
    quota = (
        "couldn't assign flavors to pod set master: "
        "insufficient quota for nvidia.com/gpu in flavor default-flavor, 24 more needed"
    )
    workload = cs.workload(obj, [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": quota}])
    (finding,) = run_evidence.why_waiting(run, [], [], [workload])
    assert finding.what == f"queued in team-a-queue (Kueue Workload {workload['metadata']['name']}): {quota}"
    assert "quota" in finding.fix

    missing = cs.workload(
        obj,
        [
            {
                "type": "QuotaReserved",
                "status": "False",
                "reason": "Inadmissible",
                "message": "LocalQueue team-a-queue doesn't exist",
            }
        ],
    )
    (finding,) = run_evidence.why_waiting(run, [], [], [missing])
    assert "LocalQueue team-a-queue doesn't exist" in finding.what and "kubectl get localqueues" in finding.fix

    # without read access to Workloads: Kueue's events say the same
    events = pod_states.run_events([cs.event("Workload", workload["metadata"]["name"], "Pending", quota)], run.name)
    (finding,) = run_evidence.why_waiting(run, [], events, [])
    assert finding.what == f"queued in team-a-queue: {quota}"
