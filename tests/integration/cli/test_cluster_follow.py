"""Following a run to its end (`vdk execute --show --follow`, and `vdk deploy --follow` after a real deploy): rank
0's output as it is written, the last lines of a rank whose container fails, how the run ended with its diagnosis,
an exit status that is the run's outcome; Ctrl-C detaches without cancelling. The real vdk CLI and `kubernetes`
client against the HTTP-level fake API server, whose pods and logs change as an operator and kubelet change them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from tests.support import cluster_state as cs
from tests.support.jobs import write_job
from tests.support.processes import wait_or_abort
from tests.support.processes import with_stack_dumps
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs import observe

VDK = Path(sys.executable).parent / "vdk"
CONTAINER = "pytorch"


class Operator:
    """What the operator and the kubelet do to a PyTorchJob of two ranks: pods appear, log, end."""

    def __init__(self, fake, run: dict):
        self.fake, self.run = fake, run
        self.pods: list[dict] = []

    def start_ranks(self, logs=("r0 start\n", "r1 start\n")) -> None:
        self.status(conditions=[{"type": "Running", "status": "True"}], replicaStatuses={"Master": {"active": 1}})
        for rank, log in enumerate(logs):
            pod = self.fake.add("pods", cs.rank_pod(self.run, "pytorchjob", rank, cs.running()))
            self.fake.set_log(pod["metadata"]["name"], CONTAINER, log)
            self.pods.append(pod)

    def log(self, rank: int, text: str) -> None:
        self.fake.append_log(self.pods[rank]["metadata"]["name"], CONTAINER, text)

    def set_pod(self, rank: int, status: dict) -> None:
        with self.fake._lock:
            stored = self.fake.objects[("v1", "pods", "ml", self.pods[rank]["metadata"]["name"])]
            stored["status"] = {k: v for k, v in status.items() if not k.startswith("_")}
            for container in stored["status"].get("containerStatuses", []):
                container.setdefault("name", CONTAINER)

    def status(self, **status) -> None:
        self.fake.set_status("pytorchjobs", self.run["metadata"]["name"], status)

    def succeed(self) -> None:
        for rank in range(len(self.pods)):
            self.set_pod(rank, cs.terminated(0, "Completed"))
        self.status(conditions=[{"type": "Succeeded", "status": "True"}])

    def fail_rank_1(self) -> None:
        """Rank 1's script raises; the operator fails the run (restarts used up), rank 0 is stopped."""
        self.log(1, "Traceback (most recent call last):\nValueError: bad batch\n")
        time.sleep(0.2)
        self.set_pod(1, cs.terminated(1, finished=5))  # first
        self.set_pod(0, cs.terminated(137, finished=10))  # then rank 0, stopped by the operator
        self.status(conditions=[{"type": "Failed", "status": "True", "message": "PyTorchJob failed: Worker 0 failed"}])


def until(condition, what: str, seconds: float = 15) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def followed(fake, pod: dict) -> bool:
    name = pod["metadata"]["name"]
    return any(p.endswith(f"/pods/{name}/log") and q.get("follow") for _, p, q in fake.requests)


@pytest.fixture
def kube(cluster, tmp_path, monkeypatch):
    monkeypatch.setattr(observe, "FOLLOW_POLL_SECONDS", 0.05)
    fake, client = cluster(pytorchjob=True)
    spec = make_spec(tmp_path / "jobs", nodes="2", gpus_per_node="1")
    run = client.apply(render_run(spec, IMAGE, make_run(spec), "ml", "pytorchjob"))[0]
    return fake, Operator(fake, run)


def in_thread(*args: str) -> tuple[threading.Thread, dict]:
    results: dict = {}
    thread = threading.Thread(target=lambda: results.setdefault("r", vdk(*args)), daemon=True)
    thread.start()
    return thread, results


def test_show_follow_streams_rank_0_until_the_run_succeeds_and_exits_0(kube):
    fake, operator = kube
    operator.start_ranks()
    follower, results = in_thread("execute", "--show", "--follow", "-n", "mnist-ddp", "-t", "Vision Research")
    until(lambda: followed(fake, operator.pods[0]), "rank 0 to be followed")
    operator.log(0, "[vdk-ml-training] progress step=10/100 loss=2.31\n")
    operator.log(1, "r1 says something rank 0 does not\n")
    time.sleep(0.3)
    operator.succeed()
    follower.join(timeout=20)
    assert not follower.is_alive(), "follow did not end with the run"
    result = results["r"]
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines() == [
        "[rank 0] r0 start",
        "[rank 0] [vdk-ml-training] progress step=10/100 loss=2.31",
    ]
    assert f"{operator.run['metadata']['name']} Succeeded" in result.stderr


def test_show_follow_shows_the_failing_rank_s_last_lines_and_exits_1(kube):
    fake, operator = kube
    operator.start_ranks()
    follower, results = in_thread("execute", "--show", "--follow", "-n", "mnist-ddp", "-t", "Vision Research")
    until(lambda: followed(fake, operator.pods[1]), "rank 1 to be followed")
    operator.fail_rank_1()
    follower.join(timeout=20)
    assert not follower.is_alive(), "follow did not end with the run"
    result = results["r"]
    assert result.exit_code == 1, result.output
    pod1 = operator.pods[1]["metadata"]["name"]
    assert f"[rank 1] exited with code 1 (pod {pod1})" in result.stderr
    assert "[rank 1] | ValueError: bad batch" in result.stdout  # its last lines
    assert "[rank 1] | r1 start" in result.stdout
    run = operator.run["metadata"]["name"]
    assert f"{run} Failed" in result.stderr
    assert f"rank 1 (pod {pod1}) exited with code 1" in result.stderr  # the diagnosis, first rank to fail
    assert not [m for m, _, _ in fake.requests if m == "DELETE"]


def test_a_restarted_rank_s_failure_is_shown_as_it_happens(kube):
    fake, operator = kube
    operator.start_ranks()
    follower, results = in_thread("execute", "--show", "--follow", "-n", "mnist-ddp", "-t", "Vision Research")
    until(lambda: followed(fake, operator.pods[1]), "rank 1 to be followed")
    pod1 = operator.pods[1]["metadata"]["name"]
    # rank 1 crashes and is restarted in place (OnFailure): its previous container's log holds the crash
    fake.set_log(pod1, CONTAINER, "r1 start\nRuntimeError: NCCL timeout\n", previous=True)
    operator.set_pod(1, cs.waiting("CrashLoopBackOff", restarts=1, last=cs.termination(1)))
    until(lambda: any(p.endswith(f"/pods/{pod1}/log") and q.get("previous") for _, p, q in fake.requests), "the tail")
    time.sleep(0.3)
    operator.succeed()
    follower.join(timeout=20)
    result = results["r"]
    assert result.exit_code == 0, result.output
    assert f"[rank 1] its previous container exited with code 1 (pod {pod1})" in result.stderr
    assert "[rank 1] | RuntimeError: NCCL timeout" in result.stdout


@pytest.mark.parametrize("verb", ["--show", "--logs"])
def test_ctrl_c_detaches_without_cancelling_and_says_how_to_reattach(kube, verb):
    fake, operator = kube
    operator.start_ranks()
    env = with_stack_dumps({k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")})
    proc = subprocess.Popen(
        [str(VDK), "execute", verb, "--follow", "-n", "mnist-ddp", "-t", "Vision Research"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    said: dict[str, list[str]] = {"stdout": [], "stderr": []}

    def read(name: str) -> None:
        for line in getattr(proc, name):
            said[name].append(line)

    readers = [threading.Thread(target=read, args=(name,), daemon=True) for name in said]
    for reader in readers:
        reader.start()
    try:
        # Ctrl-C once rank 0's first line is shown (its log request reaching the server is not enough: the
        # line may still be on its way, and a detach does not wait for it)
        until(lambda: "[rank 0] r0 start\n" in said["stdout"], "rank 0's first line", seconds=60)
        assert followed(fake, operator.pods[0])
        proc.send_signal(signal.SIGINT)
        wait_or_abort(proc, 30)  # if it outlives the signal, its stacks are in the failure's stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        for reader in readers:
            reader.join(timeout=10)
    stderr = "".join(said["stderr"])
    run = operator.run["metadata"]["name"]
    assert proc.returncode == 130, stderr  # not 0: a script must not go on as if the run had ended
    if verb == "--show":
        assert f"Detached from {run} (SIGINT); it goes on, nothing was cancelled." in stderr
        assert f"follow it again:  vdk execute --show -n mnist-ddp -t Vision-Research -i {run} --follow" in stderr
    else:
        assert "Stopped following the logs (SIGINT); the run goes on, nothing was cancelled." in stderr
    assert "Traceback" not in stderr
    assert not [m for m, _, _ in fake.requests if m == "DELETE"]
    assert fake.run_objects()  # the run is still there


def test_follow_refuses_what_it_cannot_follow(tmp_path):
    job = write_job(tmp_path, ml={"gpus_per_node": "0"})
    for extra in (["--dry-run"], ["--build-only"], ["-o", "json"]):
        result = vdk("deploy", "-p", str(job), "--follow", *extra)
        assert result.exit_code == 1, result.output
        assert "--follow follows the run a deploy starts" in result.stderr
    listed = vdk("execute", "--list", "--follow", "-n", "my-job")
    assert listed.exit_code == 2 and "--follow goes with --logs" in listed.stderr


# --- vdk deploy --follow --------------------------------------------------------------------------------------


@pytest.mark.usefixtures("isolated_environment")
@pytest.mark.parametrize("outcome", ["succeeds", "fails"])
def test_deploy_follow_starts_the_run_then_follows_it_to_its_outcome(
    outcome, tmp_path, registry, base_image, cluster, monkeypatch
):
    monkeypatch.setattr(observe, "FOLLOW_POLL_SECONDS", 0.05)
    fake = cluster(pytorchjob=True)[0]
    monkeypatch.setenv("VDK_ML_TRAINING_REGISTRY", f"{registry.host}/team")
    job = write_job(
        tmp_path,
        "followed",
        team="ml-platform",
        ml=f"base_image = {base_image}\nbase_python_version = 3.11\nbase_provides = torch\nnodes = 2\n"
        "gpus_per_node = 1\n",
        files={"train.py": 'import torch\n\nif __name__ == "__main__":\n    print("train")\n'},
    )
    deployer, results = in_thread("deploy", "-p", str(job), "--skip-smoke", "--follow")
    until(lambda: fake.stored("pytorchjobs"), "the deploy to create its run", seconds=300)
    operator = Operator(fake, fake.stored("pytorchjobs")[0])
    operator.start_ranks()
    until(lambda: followed(fake, operator.pods[1]), "the ranks to be followed")
    operator.log(0, "[vdk-ml-training] progress step=1/2 loss=0.5\n")
    time.sleep(0.3)
    if outcome == "succeeds":
        operator.succeed()
    else:
        operator.fail_rank_1()
    deployer.join(timeout=30)
    assert not deployer.is_alive(), "deploy --follow did not end with the run"
    result = results["r"]
    run = operator.run["metadata"]["name"]
    assert f"Started run {run} of followed" in result.stdout
    assert "Follow it:" not in result.stdout  # it is followed already
    assert "[rank 0] [vdk-ml-training] progress step=1/2 loss=0.5" in result.stdout
    if outcome == "succeeds":
        assert result.exit_code == 0, result.output
        assert f"{run} Succeeded" in result.stderr
    else:
        assert result.exit_code == 1, result.output
        assert "[rank 1] | ValueError: bad batch" in result.stdout
        assert f"{run} Failed" in result.stderr
