"""What the launcher reads of its own Job and pod (k8s/own_execution.py): the template's deadline from the Job's
start, and when the launcher leaves before it; a schedule's execution; a cancel (the Job being deleted); the image
it runs, by the digest the kubelet pulled."""

from __future__ import annotations

from datetime import datetime

from vdk.plugin.ml_training.k8s.own_execution import image_of
from vdk.plugin.ml_training.k8s.own_execution import leave_margin
from vdk.plugin.ml_training.k8s.own_execution import parse_own_job

STARTED = "2025-05-13T10:00:00Z"
STARTED_AT = datetime.fromisoformat("2025-05-13T10:00:00+00:00").timestamp()


def job(**metadata) -> dict:
    return {
        "metadata": {"name": "mnist-ddp-1747130400", **metadata},
        "spec": {"activeDeadlineSeconds": 43200, "backoffLimit": 3},
        "status": {"startTime": STARTED},
    }


def test_the_launcher_leaves_a_tenth_of_the_deadline_before_it_within_bounds():
    own = parse_own_job(job(), "data-jobs")
    assert own.deadline_seconds == 43200 and own.leave_at == STARTED_AT + 43200 - 300  # at most 300 s
    assert leave_margin(600) == 60 and leave_margin(40) == 10 and leave_margin(12) == 6  # at least 10 s, at most half
    assert parse_own_job({"metadata": {}, "spec": {}, "status": {}}, "ns").leave_at is None  # no deadline


def test_a_scheduled_execution_and_a_cancelled_one_are_told_by_the_job():
    assert not parse_own_job(job(), "ns").scheduled
    scheduled = parse_own_job(job(annotations={"com.vmware.taurus/execution-type": "scheduled"}), "ns")
    assert scheduled.scheduled and not scheduled.deleting
    assert parse_own_job(job(deletionTimestamp="2025-05-13T10:05:00Z"), "ns").deleting


def pod(image: str, image_id: str | None) -> dict:
    status = {"name": "mnist-ddp", **({"imageID": image_id} if image_id is not None else {})}
    return {
        "spec": {"containers": [{"name": "sidecar", "image": "other:1"}, {"name": "mnist-ddp", "image": image}]},
        "status": {"containerStatuses": [status]},
    }


def test_the_image_is_the_one_the_kubelet_pulled_by_digest_else_as_named():
    digest = "sha256:" + "c" * 64
    assert image_of(pod("reg:5000/jobs/mnist-ddp:abc", f"reg:5000/jobs/mnist-ddp@{digest}"), "mnist-ddp") == (
        f"reg:5000/jobs/mnist-ddp@{digest}"
    )
    assert image_of(pod("reg:5000/jobs/mnist-ddp:abc", f"docker-pullable://x/y@{digest}"), "mnist-ddp") == (
        f"reg:5000/jobs/mnist-ddp@{digest}"
    )
    assert image_of(pod("reg:5000/jobs/mnist-ddp:abc", None), "mnist-ddp") == "reg:5000/jobs/mnist-ddp:abc"
    assert image_of({"spec": {"containers": []}}, "mnist-ddp") is None
