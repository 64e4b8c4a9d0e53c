"""Runs stopped at their time limit."""

from tests.support.rendered_runs import run_object
from vdk.plugin.ml_training.k8s.runs import cluster_evidence as run_evidence
from vdk.plugin.ml_training.k8s.runs.summary import summarize


def test_failed_run_without_pods_says_they_are_gone(tmp_path):
    obj = run_object(tmp_path, "job")
    obj["status"] = {
        "conditions": [
            {
                "type": "Failed",
                "status": "True",
                "reason": "DeadlineExceeded",
                "message": "Job was active longer than specified deadline",
            }
        ]
    }
    finding = run_evidence.why_failed(summarize(obj), [])
    assert finding.what == "Job was active longer than specified deadline"
    assert "max_runtime" in finding.fix
