"""A rank held by its data step (the init container that fetches the pinned datasets): what it said, and its fix,
read from the termination message the data step leaves."""

from tests.support import cluster_state as cs
from tests.support.rendered_runs import pods
from tests.support.rendered_runs import run_object
from vdk.plugin.ml_training.k8s.runs import cluster_evidence as run_evidence
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.k8s.runs.summary import summarize

MESSAGE = (
    "[vdk-ml-training] data failed: data/train: s3://vision/train changed since it was pinned at deploy (its object "
    "list is 1234, pinned 5678), and the bucket is not versioned, so the pinned objects are gone\n"
    "Fix: deploy again to train on the data as it is now (`vdk deploy`), or enable versioning on the bucket"
)


def held_by_init(message: str, waiting: str | None = "CrashLoopBackOff") -> dict:
    status = cs.waiting("PodInitializing")
    ended = {"exitCode": 1, "reason": "Error", "message": message}
    init = {"name": "vdk-data", "state": {"waiting": {"reason": waiting}} if waiting else {"terminated": ended}}
    if waiting:
        init["lastState"] = {"terminated": ended}
    status["initContainerStatuses"] = [init]
    return status


def test_a_failed_data_step_says_what_it_said_and_its_fix(tmp_path):
    obj = run_object(tmp_path, "job", nodes="1")
    ranks = pod_states.rank_states(pods(obj, "job", held_by_init(MESSAGE)), "job")
    assert ranks[0].waiting_reason == "Init:CrashLoopBackOff"
    (finding,) = run_evidence.why_waiting(summarize(obj), ranks, [], [])
    assert "the data step failed (Init:CrashLoopBackOff): data/train: s3://vision/train changed since" in finding.what
    assert finding.fix.startswith("deploy again to train on the data as it is now")


def test_another_init_container_that_failed_is_named(tmp_path):
    obj = run_object(tmp_path, "job", nodes="1")
    ranks = pod_states.rank_states(pods(obj, "job", held_by_init("exec format error", waiting=None)), "job")
    (finding,) = run_evidence.why_waiting(summarize(obj), ranks, [], [])
    assert "an init container failed (Init:Error): exec format error" in finding.what and "--logs" in finding.fix
