"""The job's lease (k8s/lease.py) against the fake API server, which serves coordination.k8s.io/v1 Leases as the
real one does (an update needs the resourceVersion it read, a stale one is a 409 Conflict, a delete's
preconditions are checked, MicroTimes are decoded as Go decodes them): two holders never hold it at once, the
second waits and says so, a lease whose holder was killed is taken after its duration, renewals keep a lease held
past it, and nothing is left once it is given back."""

from __future__ import annotations

import threading
import time

import pytest

from vdk.plugin.ml_training.k8s import lease
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.client import KubeClient
from vdk.plugin.ml_training.k8s.resources import LEASE

NAME = "mnist-deploy"


@pytest.fixture
def fake(cluster):
    fake, _ = cluster()
    return fake


def holding(seconds: float, spans: list, said: list, **options) -> threading.Thread:
    """A thread that holds the lease for `seconds` with a client of its own, recording when it held it."""

    def hold() -> None:
        with lease.hold(KubeClient(), NAME, said.append, "testing", **options):
            start = time.monotonic()
            time.sleep(seconds)
            spans.append((start, time.monotonic()))

    thread = threading.Thread(target=hold)
    thread.start()
    return thread


def test_two_commands_never_hold_the_lease_at_once_and_the_second_says_it_waits(fake):
    spans: list = []
    said: list = []
    first = holding(1.0, spans, said)
    while not fake.stored("leases"):
        time.sleep(0.01)
    second = holding(0.2, spans, said)
    first.join(10)
    second.join(10)
    (a_start, a_end), (b_start, b_end) = sorted(spans)
    assert a_end <= b_start  # one after the other
    assert any(
        line.startswith("Waiting for another vdk (") and f"it holds the lease {NAME} (testing;" in line for line in said
    )
    assert fake.stored("leases") == []  # given back: deleted, with its uid and resourceVersion as preconditions
    deletes = [body for method, path, body in fake.requests if method == "DELETE" and path.endswith(f"/leases/{NAME}")]
    assert len(deletes) == 2


def test_a_lease_whose_holder_was_killed_is_taken_after_its_duration(fake):
    client = KubeClient()
    client.transport.request(
        "POST",
        LEASE.path("ml"),
        body=lease._lease(NAME, "ml", "ghost@gone/1/abc", 1, 0, {}),
        action=LEASE.action("create", "ml", NAME),
    )  # its holder never renews it again, nor gives it back
    said: list = []
    started = time.monotonic()
    with lease.hold(client, NAME, said.append, "testing", duration=1) as held:
        waited = time.monotonic() - started
        (stored,) = fake.stored("leases")
        assert stored["spec"]["holderIdentity"] == held.holder != "ghost@gone/1/abc"
        assert stored["spec"]["leaseTransitions"] == 1
    assert 1.0 <= waited < 5  # its duration, measured on this machine's clock from when it was first seen
    assert said and "ghost@gone/1/abc" in said[0]
    assert fake.stored("leases") == []


def test_renewals_keep_a_lease_held_past_its_duration(fake):
    spans: list = []
    said: list = []
    first = holding(2.0, spans, said, duration=1)  # renewed every third of a second
    while not fake.stored("leases"):
        time.sleep(0.01)
    second = holding(0.1, spans, said, duration=1)
    first.join(10)
    second.join(10)
    (a_start, a_end), (b_start, b_end) = sorted(spans)
    assert a_end <= b_start  # not taken over after 1 s: the holder kept renewing it
    assert fake.requests_to("PUT", f"/leases/{NAME}") >= 3


def test_the_fake_serves_leases_as_the_api_server_does(fake):
    client = KubeClient()
    body = lease._lease(NAME, "ml", "me", 30, 0, {})
    created = client.transport.request("POST", LEASE.path("ml"), body=body, action=LEASE.action("create", "ml", NAME))
    path, update = LEASE.path("ml", NAME), LEASE.action("update", "ml", NAME)

    def put(sent: dict) -> dict:
        return client.transport.request("PUT", path, body=sent, action=update, retry=False)

    unversioned = {**created, "metadata": {k: v for k, v in created["metadata"].items() if k != "resourceVersion"}}
    with pytest.raises(KubeApiError) as e:
        put(unversioned)  # a Lease allows no unconditional update
    assert e.value.status == 422 and "metadata.resourceVersion: Invalid value: 0x0: must be specified" in e.value.detail
    renewed = put({**created, "spec": {**created["spec"], "renewTime": lease.micro_time()}})
    with pytest.raises(KubeApiError) as e:
        put(created)  # read before the renewal: stale
    assert e.value.status == 409 and "the object has been modified" in e.value.detail
    with pytest.raises(KubeApiError) as e:
        put({**renewed, "spec": {**renewed["spec"], "renewTime": "2025-01-01T00:00:00Z"}})  # not a MicroTime
    assert e.value.status == 400 and "2006-01-02T15:04:05.000000Z07:00" in e.value.detail
    stale = {"kind": "DeleteOptions", "preconditions": {"resourceVersion": created["metadata"]["resourceVersion"]}}
    with pytest.raises(KubeApiError) as e:
        client.transport.request("DELETE", path, body=stale, action=LEASE.action("delete", "ml", NAME))
    assert e.value.status == 409 and "Precondition failed: ResourceVersion in precondition" in e.value.detail
    assert [o["spec"]["renewTime"] for o in fake.stored("leases")] == [renewed["spec"]["renewTime"]]
