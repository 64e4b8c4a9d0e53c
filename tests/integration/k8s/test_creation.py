"""A run's objects are created exactly once, whatever the network does: the fault-injecting fake API server
drops or resets the reply after the create, answers past the client's timeout, turns requests away with 429
and Retry-After, fails once or always, or resets before the request is done. Each outcome is asserted: no
orphaned run, no duplicate run, the record present, the retries bounded, the message clear."""

from __future__ import annotations

import time

import pytest

from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.manifests import render_run

PLURAL = {"PyTorchJob": "pytorchjobs", "Job": "jobs", "Service": "services", "ConfigMap": "configmaps"}


@pytest.fixture
def spec(tmp_path):
    return make_spec(tmp_path, nodes="2", gpus_per_node="1")


def render(spec, backend):
    run = make_run(spec)
    return run, render_run(spec, IMAGE, run, "ml", backend)


def run_objects(run, backend) -> list[str]:
    kinds = {"pytorchjob": ["ConfigMap", "PyTorchJob"], "job": ["ConfigMap", "Job", "Service"]}[backend]
    suffix = {"ConfigMap": "-record"}
    return sorted(f"{k}/{run.name}{suffix.get(k, '')}" for k in kinds)


def creates(fake, plural: str) -> int:
    return fake.requests_to("POST", f"/{plural}")


@pytest.mark.parametrize("kind", ["PyTorchJob", "ConfigMap"])
@pytest.mark.parametrize("fault", ["drop after", "reset after", "late"])
def test_a_create_whose_answer_is_lost_is_adopted_not_made_twice(cluster, spec, fast_retries, capfd, kind, fault):
    fake, client = cluster(pytorchjob=True)
    run, manifests = render(spec, "pytorchjob")
    if fault == "drop after":
        fake.drop("POST", PLURAL[kind], after=True)
    elif fault == "reset after":
        fake.reset("POST", PLURAL[kind], after=True)
    else:
        client.transport.timeout = (5, 0.5)
        fake.delay("POST", PLURAL[kind], 1.5)
    created = client.apply(manifests)
    assert [o["kind"] for o in created] == ["PyTorchJob", "ConfigMap"]
    assert fake.run_objects() == run_objects(run, "pytorchjob")  # the run and its record, once
    assert creates(fake, PLURAL[kind]) == 1  # found by its name, not created again
    record = client.read_run_record(run.name)
    assert record.run_name == run.name and record.image == IMAGE.reference
    owner = fake.stored("pytorchjobs")[0]["metadata"]["uid"]
    assert [r["uid"] for r in fake.stored("configmaps")[0]["metadata"]["ownerReferences"]] == [owner]
    err = capfd.readouterr().err
    how = "did not answer in time" if fault == "late" else "closed the connection without an answer"
    name = created[0 if kind == "PyTorchJob" else 1]["metadata"]["name"]
    assert f"note: the Kubernetes API server {how} to create {kind} {name} in namespace ml, but it was done" in err
    assert err.count("\n") == 1  # one line says it


@pytest.mark.parametrize("fault", ["reset", "drop"])
def test_a_create_the_server_never_did_is_sent_again(cluster, spec, fast_retries, capfd, fault):
    fake, client = cluster()
    run, manifests = render(spec, "job")
    getattr(fake, fault)("POST", "jobs")
    client.apply(manifests)
    assert fake.run_objects() == run_objects(run, "job")
    assert creates(fake, "jobs") == 2
    # looked up by its name before it was sent again
    assert fake.requests_to("GET", f"/jobs/{run.name}") == 1
    err = capfd.readouterr().err.splitlines()
    assert err == [
        f"note: the Kubernetes API server closed the connection without an answer to create Job {run.name} in "
        f"namespace ml; Job {run.name} does not exist: creating it again in {err[0].split(' in ')[-1]}"
    ]
    assert "(attempt 2 of at most 4)" in err[0]


def test_429_waits_what_retry_after_asks_then_creates(cluster, spec, capfd):
    fake, client = cluster(pytorchjob=True)
    run, manifests = render(spec, "pytorchjob")
    fake.fail("POST", "pytorchjobs", 429, "TooManyRequests", "Too many requests, please try again later.", 1, 1)
    started = time.monotonic()
    client.apply(manifests)
    assert time.monotonic() - started >= 1.0  # the server's Retry-After, honoured
    assert fake.run_objects() == run_objects(run, "pytorchjob") and creates(fake, "pytorchjobs") == 2
    (line,) = capfd.readouterr().err.splitlines()
    assert line.startswith(
        f"note: the Kubernetes API server answered 429 TooManyRequests to create PyTorchJob {run.name} in namespace "
        f"ml (Retry-After 1 s); PyTorchJob {run.name} does not exist: creating it again in 1."
    )


def test_500_once_is_retried_and_500_always_is_bounded_and_leaves_nothing(cluster, spec, fast_retries, capfd):
    fake, client = cluster(pytorchjob=True)
    run, manifests = render(spec, "pytorchjob")
    fake.fail("POST", "configmaps", 500, "InternalError", "etcdserver: leader changed")
    client.apply(manifests)
    assert fake.run_objects() == run_objects(run, "pytorchjob")
    assert len(capfd.readouterr().err.splitlines()) == 1

    run, manifests = render(spec, "pytorchjob")
    before = set(fake.run_objects())
    fake.fail("POST", "pytorchjobs", 500, "InternalError", "etcdserver: request timed out", times=None)
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert set(fake.run_objects()) == before  # no part of the second run
    assert creates(fake, "pytorchjobs") == 1 + fast_retries.attempts  # the first run's, then the bounded attempts
    assert e.value.problem.startswith(
        f"the Kubernetes API server failed to create PyTorchJob {run.name} in namespace ml: 500 InternalError: "
        f"etcdserver: request timed out (tried {fast_retries.attempts} times in "
    )
    assert "kubectl --context fake get --raw /readyz?verbose" in e.value.fix
    assert len(capfd.readouterr().err.splitlines()) == fast_retries.attempts - 1  # one line per retry


def test_retries_end_within_their_time_budget(cluster, spec, monkeypatch, capfd):
    from vdk.plugin.ml_training.k8s import retries

    fake, client = cluster()
    policy = retries.RetryPolicy(attempts=50, base_seconds=0.2, budget_seconds=1.5)
    monkeypatch.setattr(retries, "DEFAULT_POLICY", policy)
    fake.fail("GET", "jobs", 503, "ServiceUnavailable", "the server is currently unable to handle the request", None)
    started = time.monotonic()
    with pytest.raises(MLTrainingError) as e:
        client.list_runs()
    assert time.monotonic() - started < 1.5 + 0.5
    assert "503" in e.value.problem and "tried" in e.value.problem
    tried = fake.requests_to("GET", "/jobs")
    assert 2 <= tried < 50 and len(capfd.readouterr().err.splitlines()) == tried - 1


def test_a_server_that_asks_for_longer_than_the_budget_is_not_waited_for(cluster, spec, fast_retries):
    fake, client = cluster()
    fake.fail("GET", "jobs", 429, "TooManyRequests", "Too many requests, please try again later.", None, 3600)
    with pytest.raises(MLTrainingError) as e:
        client.list_runs()
    assert fake.requests_to("GET", "/jobs") == 1
    assert "429" in e.value.problem


def test_a_create_refused_for_good_is_not_retried(cluster, spec, fast_retries, capfd):
    fake, client = cluster()
    run, manifests = render(spec, "job")
    fake.fail("POST", "jobs", 403, "Forbidden", 'jobs.batch is forbidden: User "tester" cannot create resource')
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "403 Forbidden" in e.value.problem and creates(fake, "jobs") == 1
    assert fake.requests_to("GET", f"/jobs/{run.name}") == 0  # nothing to look up: it was refused
    assert capfd.readouterr().err == "" and fake.run_objects() == []


def test_a_delete_cut_short_says_what_was_deleted_and_what_remains(cluster, spec, fast_retries):
    fake, client = cluster()
    run, manifests = render(spec, "job")
    client.apply(manifests)
    fake.fail("DELETE", "services", 500, "InternalError", "etcdserver: request timed out", times=None)
    # the run's objects as `delete_run` finds them: the Job first, then what it owns
    with pytest.raises(MLTrainingError) as e:
        client.delete_run(run.name, "job")
    assert e.value.problem.startswith(
        f"deleting run {run.name} stopped part way: the Kubernetes API server failed to delete Service {run.name}"
    )
    assert f"; deleted Job/{run.name}; still there: Service/{run.name}, ConfigMap/{run.name}-record" in e.value.problem
    assert f"kubectl delete --context fake -n ml services/{run.name} configmaps/{run.name}-record" in e.value.fix


def test_another_s_object_of_the_run_s_name_is_neither_taken_nor_deleted(cluster, spec, fast_retries):
    fake, client = cluster()
    run, manifests = render(spec, "job")
    foreign = fake.add("configmaps", {"metadata": {"name": f"{run.name}-record", "labels": {"app": "other"}}})
    fake.fail("POST", "configmaps", 503, "ServiceUnavailable", "the server is currently unable to handle the request")
    with pytest.raises(MLTrainingError):
        client.apply(manifests)
    (kept,) = fake.stored("configmaps")
    assert kept["metadata"]["uid"] == foreign["metadata"]["uid"]  # not adopted, not deleted by the rollback
    assert fake.stored("jobs") == [] and fake.stored("services") == []


def test_a_lost_answer_that_cannot_be_looked_up_is_deleted_again(cluster, spec, fast_retries):
    fake, client = cluster(pytorchjob=True)
    run, manifests = render(spec, "pytorchjob")
    fake.drop("POST", "pytorchjobs", after=True)  # created, the answer lost
    fake.forbidden.add(("get", "pytorchjobs"))  # and it may not be read
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    assert "403" in e.value.problem
    assert (
        f"Nothing was left in the cluster: what was created was deleted again (PyTorchJob/{run.name}, "
        f"ConfigMap/{run.name}-record)" in e.value.problem
    )
    assert fake.run_objects() == []


# --- an API server that commits after the client gave up --------------------------------------------------------


def wait_for(predicate, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return predicate()


@pytest.fixture
def two_attempts(monkeypatch):
    from vdk.plugin.ml_training.k8s import retries

    policy = retries.RetryPolicy(attempts=2, base_seconds=0.01, max_wait_seconds=0.05, budget_seconds=20)
    monkeypatch.setattr(retries, "DEFAULT_POLICY", policy)
    return policy


def test_a_run_the_server_commits_after_the_client_gave_up_is_deleted_when_it_appears(cluster, spec, two_attempts):
    """The overloaded server of the audit: every create of the PyTorchJob is answered after the client's timeout,
    and done later still. The deploy fails, saying that the run may still appear and what happens to it then; when
    it appears, its owner (the record) is gone and Kubernetes deletes it: no run is left without a record."""
    fake, client = cluster(pytorchjob=True)
    run, manifests = render(spec, "pytorchjob")
    client.transport.timeout = (5, 0.5)
    fake.slow("POST", "pytorchjobs", 4.0, times=None)
    with pytest.raises(MLTrainingError) as e:
        client.apply(manifests)
    problem = e.value.problem
    assert f"did not answer within 0.5 s to create PyTorchJob {run.name} in namespace ml (tried 2 times" in problem
    assert (
        f"Nothing was left in the cluster: what was created was deleted again (ConfigMap/{run.name}-record); "
        f"PyTorchJob/{run.name}, which the API server may still write, is deleted by Kubernetes as soon as it appears "
        "(its owner, the run's record, was deleted): deploying again starts one run"
    ) in problem
    assert fake.run_objects() == []
    assert wait_for(lambda: f"PyTorchJob/{run.name}" in fake.collected, 5)  # it did appear, and went
    time.sleep(0.8)  # the second attempt's commit too
    assert fake.run_objects() == [] and fake.stored("pytorchjobs") == []
    assert creates(fake, "pytorchjobs") == 2


def test_a_run_whose_record_was_settled_is_kept_with_it(cluster, spec, fast_retries):
    """The record and its run own each other once both exist: deleting either takes the other along."""
    fake, client = cluster(pytorchjob=True)
    run, manifests = render(spec, "pytorchjob")
    main, record = client.apply(manifests)
    assert [r["uid"] for r in main["metadata"]["ownerReferences"]] == [record["metadata"]["uid"]]
    assert [r["uid"] for r in record["metadata"]["ownerReferences"]] == [main["metadata"]["uid"]]
    time.sleep(0.3)  # the garbage collector looked: both have their owner
    assert fake.run_objects() == run_objects(run, "pytorchjob")
    client.delete(client.resource_type(record), record["metadata"]["name"], "ml")
    assert fake.run_objects() == []  # the run went with its record


def test_a_record_left_by_a_command_that_gave_up_is_settled_by_the_next(cluster, spec, fast_retries, capfd):
    from vdk.plugin.ml_training.k8s.runs import pending_records

    fake, client = cluster(pytorchjob=True)
    (run, manifests), (other, others) = render(spec, "pytorchjob"), render(spec, "pytorchjob")
    # a command killed between the record's create and the run's: its record alone, owning nothing
    client.create(*client.prepare(manifests[1]))
    # one killed between the run's create and the record's completion: the run exists, owned by its record
    record = client.create(*client.prepare(others[1]))
    client.create(*client.prepare(creation_owned(others[0], record)))
    assert pending_records.settle(client, spec.name) == [
        f"run {other.name} was created after its command gave up: its record {other.name}-record is complete"
    ]  # the record alone is young: its run may be being created right now
    fake.backdate("configmaps", f"{run.name}-record", pending_records.PENDING_SECONDS + 1)
    client.forget_job(spec.name)
    assert pending_records.settle(client, spec.name) == [
        f"removed the record {run.name}-record of run {run.name}, whose creation never completed"
    ]
    assert fake.run_objects() == run_objects(other, "pytorchjob")
    stored = {o["metadata"]["name"]: o for o in fake.stored("configmaps")}
    assert [r["kind"] for r in stored[f"{other.name}-record"]["metadata"]["ownerReferences"]] == ["PyTorchJob"]
    err = capfd.readouterr().err
    assert f"note: removed the record {run.name}-record of run {run.name}" in err


def creation_owned(manifest: dict, owner: dict) -> dict:
    from vdk.plugin.ml_training.k8s.creation import owned_by

    return owned_by(manifest, owner)
