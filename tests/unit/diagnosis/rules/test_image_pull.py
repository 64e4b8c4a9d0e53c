"""Images the nodes cannot pull: what the registry said, and what to fix."""

import pytest

from tests.support import cluster_state as cs
from tests.support.rendered_runs import pods
from tests.support.rendered_runs import run_object
from vdk.plugin.ml_training.k8s.runs import cluster_evidence as run_evidence
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.k8s.runs.summary import summarize


@pytest.mark.parametrize(
    "message, expected",
    [
        (
            'failed to pull and unpack image "r.example.com/ml/x@sha256:ab": failed to authorize: 401 Unauthorized',
            "name it in `image_pull_secrets` of [ml-training]",
        ),
        (
            'rpc error: code = NotFound desc = failed to pull image "r.example.com/ml/x@sha256:ab": not found',
            "deploy again",
        ),
        ("dial tcp: lookup registry.internal on 10.0.0.10:53: no such host", "reachable from inside the cluster"),
    ],
)
def test_image_pull_failures_say_what_to_fix(tmp_path, message, expected):
    obj = run_object(tmp_path, "job", nodes="1")
    run = summarize(obj)
    ranks = pod_states.rank_states(
        pods(obj, "job", cs.waiting("ImagePullBackOff", f"Back-off pulling image: {message}")), "job"
    )
    (finding,) = run_evidence.why_waiting(run, ranks, [], [])
    assert finding.what.startswith("rank 0 (pod ") and "cannot pull the image (ImagePullBackOff)" in finding.what
    assert message in finding.what and expected in finding.fix
