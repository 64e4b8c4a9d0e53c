"""The cluster verbs under faults, through the real vdk CLI and `kubernetes` client against the fault-injecting
fake API server: every view prints what it could read and says in one line what it could not (a pod's log gone
or refused or late, a failing pods list, events, Kueue, one backend's runs, the records); requests the server
turns away are retried, each retry said; -n is checked before it reaches a label selector; SIGTERM and SIGHUP
in the middle of a create leave nothing behind."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support import cluster_state as cs
from tests.support.deployed_runs import Cluster
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s import transport

GPU_FULL = "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."


@pytest.fixture
def kube(cluster, tmp_path):
    fake, client = cluster(pytorchjob=True, trainer_mechanism="runtimePatches", kueue=True)
    return Cluster(fake, client, tmp_path / "jobs")


def ok(result):
    assert result.exit_code == 0, f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def notes(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith("note: ")]


def failed_run(kube: Cluster) -> tuple[dict, dict, dict]:
    """A PyTorchJob whose rank 0 failed with a log, rank 1 still running."""
    run = kube.deploy(nodes="2")
    kube.status(run, conditions=[{"type": "Failed", "status": "True", "message": "PyTorchJob failed"}])
    rank0 = kube.pod(run, 0, cs.terminated(1), log="step 10\nRuntimeError: CUDA error: device-side assert\n")
    rank1 = kube.pod(run, 1, cs.running(), log="step 10\n")
    return run, rank0, rank1


# --- a pod's log ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("verb", [("show", "-n", "mnist-ddp"), ("execute", "--show", "-n", "mnist-ddp")])
def test_a_log_gone_since_the_pods_list_costs_only_that_log(kube, verb):
    """cleanPodPolicy deletes the pods at the end of a run: a pod listed a moment ago answers 404 now."""
    run, rank0, _ = failed_run(kube)
    name = rank0["metadata"]["name"]
    kube.fake.fail("GET", "pods/log", 404, "NotFound", f'pods "{name}" not found', times=None, name=name)
    out = ok(vdk(*verb)).stdout
    assert "CustomResourceDefinition" not in out and "does not serve" not in out
    assert f"{run['metadata']['name']}" in out and "RANK" in out  # the run and its ranks
    assert "exited with code 1" in out  # why it failed, from the pod's status
    assert notes(out) == [f'note: no log of rank 0: pods "{name}" not found']


def test_a_log_that_does_not_come_in_time_costs_only_that_log(kube, fast_retries, monkeypatch):
    monkeypatch.setattr(transport, "REQUEST_TIMEOUT", (5, 0.3))
    run, rank0, _ = failed_run(kube)
    kube.fake.delay("GET", "pods/log", 1.0, times=None)
    started = time.monotonic()
    result = ok(vdk("show", "-n", "mnist-ddp"))
    assert time.monotonic() - started < 20
    assert "exited with code 1" in result.stdout
    (note,) = notes(result.stdout)
    pod = rank0["metadata"]["name"]
    assert note.startswith(
        f"note: logs could not be read: the Kubernetes API server at {kube.fake.url} (kube context fake) did not "
        f"answer within 0.3 s to get Pod {pod} in namespace ml (tried {fast_retries.attempts} times"
    )
    # each log is asked for once (its attempts bounded), not once per part of the view that reads it
    reads = [q for m, p, q in kube.fake.requests if m == "GET" and p.endswith(f"{rank0['metadata']['name']}/log")]
    assert len(reads) == fast_retries.attempts


def test_logs_of_every_rank_go_on_past_one_that_cannot_be_read(kube):
    run, rank0, rank1 = failed_run(kube)
    kube.fake.fail("GET", "pods/log", 404, "NotFound", "the server could not find the requested resource", None,
                   name=rank0["metadata"]["name"])  # fmt: skip
    result = ok(vdk("execute", "--logs", "-n", "mnist-ddp"))
    assert "[rank 1] step 10" in result.stdout
    assert "[rank 0] no log: its log could not be read: the server could not find the requested resource" in (
        result.stderr
    )
    kube.fake.forbidden.add(("get", "pods/log"))
    result = vdk("execute", "--logs", "-n", "mnist-ddp", "-o", "json")
    ranks = json.loads(result.stdout)["ranks"]  # what could be said, said
    assert [r["unavailable"].split(":")[0] for r in ranks] == ["its log could not be read"] * 2
    assert 'cannot get resource "pods/log"' in ranks[1]["unavailable"]
    # no rank's log could be read: that is a failure of the command (it exited 0), with each rank's reason
    assert result.exit_code == 1, result.output
    assert "no rank's log of mnist-ddp-" in result.stderr and "rank 0: its log could not be read" in result.stderr
    assert "Fix: `vdk show -n mnist-ddp` says why its ranks have no log yet" in result.stderr
    text = vdk("execute", "--logs", "-n", "mnist-ddp")
    assert text.exit_code == 1 and "[rank 1] no log: its log could not be read" in text.stderr


# --- pods, events, Kueue ------------------------------------------------------------------------------------


def test_a_pods_list_that_keeps_failing_costs_only_the_ranks(kube, fast_retries):
    run = kube.deploy(backend="job", nodes="2", queue="team-queue")
    kube.pod(run, 0, cs.unschedulable(GPU_FULL))
    kube.fake.add("events", cs.event("Job", run["metadata"]["name"], "FailedCreate", "quota exceeded"))
    kube.fake.fail("GET", "pods", 500, "InternalError", "etcdserver: request timed out", times=None)
    result = ok(vdk("show", "-n", "mnist-ddp"))
    assert "quota exceeded" in result.stdout  # the events are still read
    assert notes(result.stdout) == [
        "note: pods could not be read (500): etcdserver: request timed out "
        f"(tried {fast_retries.attempts} times in 0 s)"
    ]
    assert "no pods yet" not in result.stdout  # unread pods are not said to be missing
    assert result.stderr.count("note: the Kubernetes API server answered 500 InternalError to list pods") == (
        fast_retries.attempts - 1
    )
    result = vdk("execute", "--logs", "-n", "mnist-ddp")
    assert result.exit_code == 1 and "has no pods" not in result.stderr  # no log read: non-zero, and why
    assert "note: pods could not be read (500): etcdserver: request timed out (tried" in result.stderr
    assert "no log of mnist-ddp-" in result.stderr and "its pods could not be listed" in result.stderr
    assert "`kubectl auth can-i list pods -n ml`" in result.stderr


def test_logs_of_a_run_without_pods_exit_non_zero_saying_why_once(kube):
    run = kube.deploy(backend="job", nodes="2")  # created, no pod yet
    result = vdk("execute", "--logs", "-n", "mnist-ddp")
    assert result.exit_code == 1 and result.stdout == ""
    assert result.stderr.count("has no pods, so no logs:") == 1, result.stderr
    assert "Fix: `vdk show -n mnist-ddp` says why it waits; `vdk execute --logs -n mnist-ddp --follow` waits" in (
        result.stderr
    )
    # ended, its pods removed: nothing to wait for
    kube.status(run, conditions=[{"type": "Complete", "status": "True"}])
    ended = vdk("execute", "--logs", "-n", "mnist-ddp")
    assert ended.exit_code == 1 and ended.stderr.count("has no pods, so no logs:") == 1, ended.stderr
    assert f"Fix: `vdk show -n mnist-ddp -i {run['metadata']['name']}` says how it ended" in ended.stderr
    assert "--follow" not in ended.stderr


def test_a_pods_list_that_fails_once_is_retried_and_said(kube, fast_retries):
    run = kube.deploy(backend="job", nodes="1")
    kube.pod(run, 0, cs.running(), log="step 1\n")
    kube.fake.fail("GET", "pods", 503, "ServiceUnavailable", "the server is currently unable to handle the request")
    result = ok(vdk("show", "-n", "mnist-ddp"))
    assert notes(result.stdout) == [] and "gpu-node-1" in result.stdout
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("note:")]
    assert line.startswith(
        "note: the Kubernetes API server answered 503 ServiceUnavailable to list pods in namespace ml; trying again in "
    )


def test_events_and_kueue_that_fail_are_notes(kube, fast_retries):
    run = kube.deploy(queue="team-queue")
    kube.pod(run, 0, cs.running(), log="step 1\n")
    kube.fake.fail("GET", "events", 500, "InternalError", "etcd down", times=None)
    kube.fake.fail("GET", "workloads", 502, "BadGateway", "proxy error", times=None)
    result = ok(vdk("show", "-n", "mnist-ddp", "-o", "json"))
    shown = json.loads(result.stdout)["latest"]
    assert shown["ranks"] and shown["events"] == []
    assert [n.split(" (tried")[0] for n in shown["notes"]] == [
        "events could not be read (500): etcd down",
        "Kueue workloads could not be read (502): proxy error",
    ]


# --- runs lists, records ------------------------------------------------------------------------------------


def test_one_backend_s_runs_that_cannot_be_listed_cost_only_those(kube, fast_retries):
    mine = kube.deploy(backend="pytorchjob")
    kube.fake.fail("GET", "trainjobs", 500, "InternalError", "etcd down", times=None)
    result = ok(vdk("list"))
    assert mine["metadata"]["name"] in result.stdout
    assert "note: runs of backend trainjob (TrainJob) could not be listed (500): etcd down (tried" in result.stderr
    # the records say which backends a job uses: trainjobs are not asked for `vdk show`
    result = ok(vdk("show", "-n", "mnist-ddp"))
    assert notes(result.stdout) == []
    # without the records, every backend is asked, and the failing one is a note
    kube.fake.fail("GET", "configmaps", 500, "InternalError", "etcd down", times=None)
    result = ok(vdk("show", "-n", "mnist-ddp"))
    assert mine["metadata"]["name"] in result.stdout
    assert [n.split(" (tried")[0] for n in notes(result.stdout)] == [
        "note: runs of backend trainjob (TrainJob) could not be listed (500): etcd down",
        f"note: the datasets it trained on: its run record cannot be read (the Kubernetes API server failed to get "
        f"ConfigMap {mine['metadata']['name']}-record in namespace ml: 500 InternalError: etcd down",
    ]
    # when nothing could be listed, the command fails, saying why and how often it tried
    kube.fake.fail("GET", "pytorchjobs", 500, "InternalError", "etcd down", times=None)
    kube.fake.fail("GET", "jobs", 500, "InternalError", "etcd down", times=None)
    result = vdk("list")
    assert result.exit_code == 1 and "etcd down (tried" in result.stderr and "readyz" in result.stderr


def test_a_list_turned_away_with_429_waits_and_lists(kube):
    mine = kube.deploy()
    kube.fake.fail("GET", "pytorchjobs", 429, "TooManyRequests", "Too many requests, please try again later.", 1, 1)
    started = time.monotonic()
    result = ok(vdk("list"))
    assert time.monotonic() - started >= 1.0
    assert mine["metadata"]["name"] in result.stdout
    (line,) = [x for x in result.stderr.splitlines() if x.startswith("note:")]
    assert "answered 429 TooManyRequests to list pytorchjobs.kubeflow.org in namespace ml (Retry-After 1 s)" in line


def test_a_followed_run_survives_a_server_failing_for_a_while(kube, fast_retries, monkeypatch):
    from vdk.plugin.ml_training.k8s.runs import observe

    monkeypatch.setattr(observe, "FOLLOW_POLL_SECONDS", 0.05)
    run = kube.deploy(backend="job", nodes="1")
    kube.pod(run, 0, cs.terminated(0), log="step 1\ndone\n")
    kube.status(run, conditions=[{"type": "Complete", "status": "True"}])
    # the run's own object answers 503 for three polls (the list that found the run went through)
    kube.fake.fail(
        "GET", "jobs", 503, "ServiceUnavailable", "restarting", 3 * fast_retries.attempts, name=run["metadata"]["name"]
    )
    result = ok(vdk("execute", "--logs", "-n", "mnist-ddp", "--follow"))
    assert "[rank 0] done" in result.stdout
    assert "[run] the run's state could not be read (503): restarting" in result.stderr


# --- deleting -----------------------------------------------------------------------------------------------


def test_a_delete_cut_short_says_which_runs_were_deleted_and_which_remain(kube, fast_retries):
    older = kube.deploy(backend="job", created=cs.ago(600))["metadata"]["name"]
    newer = kube.deploy(backend="pytorchjob", created=cs.ago(60))["metadata"]["name"]
    kube.fake.fail("DELETE", "jobs", 500, "InternalError", "etcd down", times=None)
    result = vdk("delete", "-n", "mnist-ddp", "-t", "Vision Research", "--yes")
    assert result.exit_code == 1
    assert result.stdout == f"Deleted {newer}\n"  # newest first, said as it goes
    assert f"deleting run {older} stopped part way: the Kubernetes API server failed to delete Job {older}" in (
        result.stderr
    )
    assert f"nothing of it was deleted; still there: Job/{older}, Service/{older}, ConfigMap/{older}-record" in (
        result.stderr
    )
    assert f"Deleted before that: {newer}." in result.stderr
    assert "The same command again deletes what remains of mnist-ddp" in result.stderr
    kube.fake.faults.clear()
    assert ok(vdk("delete", "-n", "mnist-ddp", "-t", "Vision Research", "--yes")).stdout == f"Deleted {older}\n"
    assert kube.fake.run_objects() == []


# --- -n ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["a,vdk.io/team!=x", "mnist=1", "Mnist", "x" * 41, "-n", "a b"])
@pytest.mark.parametrize("verb", [("show",), ("delete", "--yes"), ("execute", "--logs"), ("execute", "--list")])
def test_a_job_name_that_no_run_can_carry_is_refused_before_any_request(kube, name, verb):
    kube.deploy()
    kube.fake.requests.clear()
    result = vdk(*verb, "-n", name)
    assert result.exit_code == 1, result.output
    assert f"the job name {name!r} cannot be a Kubernetes name" in result.stderr and "use `-n " in result.stderr
    assert not [q for _, _, q in kube.fake.requests if name in q.get("labelSelector", "")]


# --- signals in the middle of a create ------------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP])
def test_a_signal_while_a_run_is_created_leaves_nothing_behind(kube, tmp_path, sig):
    first = kube.deploy(backend="pytorchjob")
    before = kube.fake.run_objects()
    creates = kube.fake.requests_to("POST", "/pytorchjobs")
    kube.fake.delay("POST", "pytorchjobs", 30)  # created, answered half a minute later
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("vdk")), "execute", "--start", "-n", "mnist-ddp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while kube.fake.requests_to("POST", "/pytorchjobs") == creates and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(sig)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + sig, err
    assert kube.fake.run_objects() == before  # the run whose create was under way was deleted again
    assert f"vdk execute interrupted by {signal.Signals(sig).name}." in err
    assert "Stopped before run " in err and "nothing of it is left in the cluster (deleted PyTorchJob/" in err
    assert out == "" and first["metadata"]["name"] in " ".join(before)


@pytest.mark.parametrize("plural", ["pytorchjobs", "configmaps"])
def test_a_signal_while_the_server_is_slow_to_create_leaves_no_run_behind(kube, tmp_path, plural):
    """The server takes seconds to write what it was asked (an overloaded API server): SIGTERM comes first, and the
    object appears after `vdk` ended. The run's PyTorchJob appears owned by a record that is gone: Kubernetes
    deletes it. A record that appears alone (nothing owns it, it owns nothing) is removed by the job's next
    command once no create can be under way any more."""
    from vdk.plugin.ml_training.k8s.runs import pending_records

    kube.deploy(backend="pytorchjob")
    before = kube.fake.run_objects()
    creates = kube.fake.requests_to("POST", f"/{plural}")
    kube.fake.slow("POST", plural, 4.0)  # written 4 s after it was asked, whoever still listens
    process = subprocess.Popen(
        [str(Path(sys.executable).with_name("vdk")), "execute", "--start", "-n", "mnist-ddp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while kube.fake.requests_to("POST", f"/{plural}") == creates and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.3)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 143, err
    (line,) = [line for line in err.splitlines() if line.startswith("Stopped before run ")]
    run = line.split()[3]
    if plural == "pytorchjobs":
        assert line.endswith(
            f"nothing of it is left in the cluster (deleted ConfigMap/{run}-record); PyTorchJob/{run}, which the API "
            "server may still write, is deleted by Kubernetes as soon as it appears (its owner, the run's record, was "
            "deleted): deploying again starts one run"
        ), line
        deadline = time.monotonic() + 10
        while f"PyTorchJob/{run}" not in kube.fake.collected and time.monotonic() < deadline:
            time.sleep(0.05)
        assert f"PyTorchJob/{run}" in kube.fake.collected  # it appeared, and its owner being gone, it went
    else:
        assert line.endswith(
            f"nothing of it is left in the cluster; ConfigMap/{run}-record, which the API server may still write, "
            "is removed by the job's next vdk deploy or vdk show"
        ), line
        deadline = time.monotonic() + 10
        while f"ConfigMap/{run}-record" not in kube.fake.run_objects() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert kube.fake.run_objects() == sorted([*before, f"ConfigMap/{run}-record"])  # it appeared, alone
        kube.fake.backdate("configmaps", f"{run}-record", pending_records.PENDING_SECONDS + 1)
        listed = ok(vdk("show", "-n", "mnist-ddp"))
        assert f"note: removed the record {run}-record of run {run}, whose creation never completed" in listed.stderr
    assert kube.fake.run_objects() == before and out == ""
