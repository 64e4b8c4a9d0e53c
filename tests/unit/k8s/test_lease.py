"""What a job's lease (k8s/lease.py) writes: a Lease the API server decodes (its times MicroTimes, six digits of
the second's fraction), whose holder tells two commands apart, even two of one process. (Taking, waiting for,
renewing and giving it back, against a server that serves Leases as the real one does:
tests/integration/k8s/test_lease_apiserver.py.)"""

from __future__ import annotations

import re
from datetime import datetime
from datetime import timezone

from vdk.plugin.ml_training.k8s import lease


def test_times_are_micro_times():
    assert lease.micro_time(datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)) == "2026-05-01T12:00:00.000000Z"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", lease.micro_time())


def test_two_commands_of_one_process_are_two_holders():
    first, second = lease.holder_identity(), lease.holder_identity()
    assert first != second and first.rsplit("/", 1)[0] == second.rsplit("/", 1)[0]


def test_a_lease_names_its_holder_duration_and_times():
    body = lease._lease("mnist-deploy", "ml", "me", 30, 2, {"vdk.io/job-name": "mnist"})
    assert body["apiVersion"] == "coordination.k8s.io/v1" and body["kind"] == "Lease"
    assert body["metadata"] == {"name": "mnist-deploy", "namespace": "ml", "labels": {"vdk.io/job-name": "mnist"}}
    spec = body["spec"]
    assert (spec["holderIdentity"], spec["leaseDurationSeconds"], spec["leaseTransitions"]) == ("me", 30, 2)
    assert spec["acquireTime"] == spec["renewTime"]
