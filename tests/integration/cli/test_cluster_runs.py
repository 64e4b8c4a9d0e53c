"""`vdk list / show / delete / execute` for ml-training jobs through the real vdk CLI, the real
`kubernetes` client and the HTTP-level fake API server, on runs that were really applied and pods,
logs and events shaped as the operators, the scheduler and the kubelet write them."""

import json
import socket
import subprocess
import sys
import threading
import time

import pytest

from tests.support import cluster_state as cs
from tests.support.deployed_runs import Cluster
from tests.support.fake_apiserver import go_bool
from tests.support.specs import IMAGE
from tests.support.specs import OUTSIDE_GIT
from tests.support.vdk_cli import vdk
from tests.support.vdk_cli import vdk_process
from vdk.plugin.ml_training.k8s.runs import observe
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.kubeflow_status import StatusPoster
from vdk.plugin.ml_training.runtime.kubeflow_status import StatusSettings
from vdk.plugin.ml_training.runtime.progress_lines import Figures
from vdk.plugin.ml_training.runtime.watchdog import Stall

GPU_FULL = (
    "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. "
    "preemption: 0/3 nodes are available: 3 No preemption victims found for incoming pod."
)


@pytest.fixture
def kube(cluster, tmp_path):
    fake, client = cluster(pytorchjob=True, trainer_mechanism="runtimePatches", kueue=True)
    return Cluster(fake, client, tmp_path / "jobs")


def ok(result):
    assert result.exit_code == 0, (
        f"exit {result.exit_code}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}\n{result.exception!r}"
    )
    return result


# --- vdk list --------------------------------------------------------------------------------------------


def test_list_shows_each_job_with_its_latest_run(kube):
    old = kube.deploy(created=cs.ago(7200))
    kube.status(old, conditions=[{"type": "Failed", "status": "True", "message": "1 Worker replica(s) failed"}])
    latest = kube.deploy(created=cs.ago(300))
    # the operator counts the Master running and the Worker not: its pod cannot be scheduled
    kube.status(
        latest,
        conditions=[{"type": "Running", "status": "True"}],
        replicaStatuses={"Master": {"active": 1}, "Worker": {}},
    )
    kube.pod(latest, 0, cs.running())
    kube.pod(latest, 1, cs.unschedulable(GPU_FULL))
    bert = kube.deploy(job="bert-ft", backend="job", nodes="1", gpus_per_node="0", created=cs.ago(90000))
    kube.status(bert, conditions=[{"type": "Complete", "status": "True"}])

    out = ok(vdk("list")).stdout
    lines = out.splitlines()
    assert lines[0] == "ml-training jobs in namespace ml (context fake):"
    assert lines[1].split() == ["JOB", "TEAM", "LATEST", "RUN", "BACKEND", "PHASE", "AGE", "NODES", "x", "GPUS", "RUNS"]
    # the operator says Running, but rank 1 cannot be scheduled: the honest phase is Pending
    bert_row, mnist_row = lines[2].split(), lines[3].split()
    assert bert_row[:6] + bert_row[7:] == [
        "bert-ft",
        "Vision",
        "Research",
        bert["metadata"]["name"],
        "job",
        "Succeeded",
        "1",
        "x",
        "CPU",
        "1",
    ]
    assert mnist_row[:6] + mnist_row[7:] == [
        "mnist-ddp",
        "Vision",
        "Research",
        latest["metadata"]["name"],
        "pytorchjob",
        "Pending",
        "2",
        "x",
        "8",
        "GPU",
        "2",
    ]
    assert bert_row[6] == "1d1h" and mnist_row[6].startswith("5m")  # ages

    entries = json.loads(ok(vdk("list", "-o", "json")).stdout)
    assert entries[1] == {
        "kind": "ml-training",
        "job_name": "mnist-ddp",
        "job_team": "Vision Research",
        "namespace": "ml",
        "latest_run": latest["metadata"]["name"],
        "backend": "pytorchjob",
        "phase": "Pending",
        "created": latest["metadata"]["creationTimestamp"],
        "nodes": 2,  # a number, as gpus_per_node is
        "nodes_min": 2,
        "gpus_per_node": 8,
        "gpu_resource": "nvidia.com/gpu",
        "runs": 2,
        "progress": None,  # its status says none (a TrainJob's Kubeflow status would)
    }
    assert [e["job_name"] for e in entries] == ["bert-ft", "mnist-ddp"]


def test_list_filters_by_team_and_says_when_there_is_nothing(kube, tmp_path):
    assert ok(vdk("list")).stdout.strip() == "No ml-training runs in namespace ml (context fake)."
    assert json.loads(ok(vdk("list", "-o", "json")).stdout) == []
    kube.deploy()
    assert json.loads(ok(vdk("list", "-t", "Other Team", "-o", "json")).stdout) == []
    assert ok(vdk("list", "-t", "Other Team")).stdout.strip() == (
        "No ml-training runs of team Other Team in namespace ml (context fake); "
        "`vdk list -a` lists the runs of every team."
    )
    assert ok(vdk("list", "-t", "Vision Research")).stdout.startswith(
        "ml-training jobs of team Vision Research in namespace ml"
    )
    assert len(json.loads(ok(vdk("list", "-t", "Vision Research", "-o", "json")).stdout)) == 1
    assert len(json.loads(ok(vdk("list", "-t", "Other Team", "-a", "-o", "json")).stdout)) == 1


def test_list_of_an_unreachable_cluster_says_what_to_do(kube, tmp_path, monkeypatch):
    kube.fake.stop()
    result = vdk("list")
    assert result.exit_code == 1
    assert "cannot reach the Kubernetes API server" in result.stderr and "connection refused" in result.stderr
    assert "kubectl --context fake cluster-info" in result.stderr
    assert result.stdout == ""


def test_an_unreachable_cluster_is_one_error_without_retry_noise(kube, tmp_path):
    with socket.socket() as s:  # a loopback port nobody listens on
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    kubeconfig = kube.fake.kubeconfig(tmp_path / "down", server=url)
    result = vdk_process("list", env={"KUBECONFIG": str(kubeconfig)})
    assert result.returncode == 1 and result.stdout == ""  # stdout is kept for results
    assert result.stderr.splitlines() == [
        f"Error: cannot reach the Kubernetes API server at {url} (kube context fake): connection refused",
        "Fix: check that the cluster is running and that this is the right context (`kubectl --context fake "
        "cluster-info`); choose another with VDK_ML_TRAINING_KUBE_CONTEXT or `kube_context` in [ml-training]",
    ]


def test_a_dropped_connection_is_retried_silently(kube):
    run = kube.deploy()
    kube.fake.drop("GET", "pytorchjobs")
    result = vdk_process("list")
    assert result.returncode == 0, result.stderr
    assert run["metadata"]["name"] in result.stdout
    assert "Retrying" not in result.stderr
    assert len([p for m, p, _ in kube.fake.requests if m == "GET" and p.endswith("/pytorchjobs")]) == 2


# --- vdk show --------------------------------------------------------------------------------------------


def test_show_explains_why_a_run_waits(kube):
    run = kube.deploy(backend="job", nodes="3")
    name = run["metadata"]["name"]
    kube.status(run, active=3)
    kube.pod(run, 0, cs.running(), log="loading data\n")
    p1 = kube.pod(run, 1, cs.unschedulable(GPU_FULL))
    p2 = kube.pod(
        run,
        2,
        cs.waiting(
            "ImagePullBackOff", 'Back-off pulling image "registry.example.com/ml/mnist-ddp@sha256:ab": 401 Unauthorized'
        ),
    )
    kube.fake.add("events", cs.event("Pod", p1["metadata"]["name"], "FailedScheduling", GPU_FULL, count=4))
    kube.fake.add(
        "events",
        cs.event(
            "Pod", p2["metadata"]["name"], "Failed", "Failed to pull image: 401 Unauthorized", component="kubelet"
        ),
    )

    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert f"Latest run {name}: Pending" in out
    assert f"rank 1 (pod {p1['metadata']['name']}): cannot be scheduled: {GPU_FULL}" in out
    assert "-> no node has that many free GPUs now" in out
    assert f"rank 2 (pod {p2['metadata']['name']}): cannot pull the image (ImagePullBackOff)" in out
    assert "name it in `image_pull_secrets` of [ml-training]" in out
    # the audit trail of the run
    assert f"image      {IMAGE.reference}" in out
    assert "commit     0123456789abcdef0123456789abcdef01234567 (with uncommitted changes)" in out
    assert "deployed   2026-01-02T03:04:05Z by ada@example.com" in out
    assert "reason     nightly retrain" in out
    # per-rank states and the scheduler's events
    assert "unschedulable" in out and "waiting: ImagePullBackOff" in out
    assert "FailedScheduling" in out and "(x4)" in out

    shown = json.loads(ok(vdk("show", "-n", "mnist-ddp", "-o", "json")).stdout)
    assert shown["kind"] == "ml-training" and shown["job_name"] == "mnist-ddp" and shown["namespace"] == "ml"
    assert [r["name"] for r in shown["runs"]] == [name]
    latest = shown["latest"]
    assert latest["phase"] == "Pending"
    assert [(r["rank"], r["state"]) for r in latest["ranks"]] == [
        ("0", "running"),
        ("1", "unschedulable"),
        ("2", "waiting: ImagePullBackOff"),
    ]
    assert [f["kind"] for f in latest["findings"]] == ["waiting", "waiting"]
    assert latest["run"]["image_digest"] == IMAGE.reference.split("@")[1]
    assert latest["run"]["git_dirty"] is True and latest["run"]["deployer"] == "ada@example.com"


def test_show_of_a_run_deployed_from_outside_git(kube):
    run = kube.deploy(provenance=OUTSIDE_GIT)
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert "commit     not in git" in out
    shown = json.loads(ok(vdk("show", "-n", "mnist-ddp", "-o", "json")).stdout)["latest"]["run"]
    assert (shown["git_commit"], shown["git_dirty"]) == (None, None)
    # runs annotated by earlier versions carry git-dirty "false" without a commit: still not "clean"
    with kube.fake._lock:
        kube.fake.objects[("kubeflow.org/v1", "pytorchjobs", "ml", run["metadata"]["name"])]["metadata"]["annotations"][
            "vdk.io/git-dirty"
        ] = "false"
    assert json.loads(ok(vdk("show", "-n", "mnist-ddp", "-o", "json")).stdout)["latest"]["run"]["git_dirty"] is None
    assert "commit     not in git" in ok(vdk("show", "-n", "mnist-ddp")).stdout


def test_show_explains_why_a_run_failed_with_the_failing_rank_s_previous_log(kube):
    run = kube.deploy(nodes="2")
    kube.status(
        run,
        conditions=[
            {
                "type": "Restarting",
                "status": "True",
                "message": "PyTorchJob is restarting because 1 Worker replica(s) failed.",
            }
        ],
    )
    kube.pod(run, 0, cs.running(), log="step 1\n")
    crashed = kube.pod(
        run,
        1,
        cs.waiting(
            "CrashLoopBackOff",
            "back-off 20s restarting failed container",
            restarts=2,
            last=cs.termination(137, "OOMKilled"),
        ),
        previous_log="".join(f"line {i}\n" for i in range(100)) + "Killed\n",
    )
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert (
        f"rank 1 (pod {crashed['metadata']['name']}) was OOMKilled: "
        "it used more memory than its limit (memory = 16Gi) (restarted 2 times)" in out
    )
    assert "-> raise `memory` in [ml-training]" in out
    assert f"Last lines of the log (rank 1, pod {crashed['metadata']['name']}, previous container):" in out
    assert "    | Killed" in out and "    | line 99" in out and "    | line 59" not in out
    reads = [q for m, p, q in kube.fake.requests if p.endswith(f"/pods/{crashed['metadata']['name']}/log")]
    assert [(q["container"], q["tailLines"]) for q in reads if go_bool(q.get("previous"))] == [
        ("pytorch", str(observe.LOG_SCAN_LINES))
    ]


def test_show_of_a_failed_run_names_the_first_rank_to_fail_and_reads_its_log(kube):
    run = kube.deploy(backend="job", nodes="2")
    kube.status(
        run,
        conditions=[
            {
                "type": "Failed",
                "status": "True",
                "reason": "PodFailurePolicy",
                "message": "Container pytorch for pod ml/x-1 failed with exit code 1 matching FailJob rule at index 0",
            }
        ],
    )
    kube.pod(run, 0, cs.terminated(143, finished=310), log="rank 0 stopped\n")
    bad = kube.pod(
        run,
        1,
        cs.terminated(1, finished=300),
        log="Traceback (most recent call last):\nModuleNotFoundError: No module named 'peft'\n",
    )
    detail = json.loads(ok(vdk("show", "-n", "mnist-ddp", "-o", "json")).stdout)["latest"]
    assert detail["phase"] == "Failed"
    (failure,) = detail["findings"]
    assert failure["kind"] == "failed" and failure["ranks"] == ["1"]
    assert failure["what"] == f"rank 1 (pod {bad['metadata']['name']}) exited with code 1"
    assert failure["log_tail"][-1] == "ModuleNotFoundError: No module named 'peft'"
    assert any("requirements.txt" in h for h in failure["hints"])


def test_show_of_a_run_whose_rank_0_failed_reads_its_log_once(kube):
    run = kube.deploy(backend="job", nodes="1")
    kube.status(run, conditions=[{"type": "Failed", "status": "True", "message": "BackoffLimitExceeded"}])
    pod = kube.pod(run, 0, cs.terminated(1), log="[vdk-ml-training] progress step=3 loss=1.5\nValueError: bad shape\n")
    kube.fake.requests.clear()
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert "progress   step 3, loss 1.5" in out and "    | ValueError: bad shape" in out
    assert len([p for m, p, _ in kube.fake.requests if p.endswith(f"/pods/{pod['metadata']['name']}/log")]) == 1


def test_show_reports_progress_from_rank_0(kube):
    run = kube.deploy(backend="trainjob")
    kube.status(run, jobsStatus=[{"name": "node", "active": 2}])
    kube.pod(
        run,
        0,
        cs.running(),
        log=(
            "[vdk-ml-training] progress step=100 total_steps=1000 loss=0.9 eta_s=4000\nnoise\n"
            "[vdk-ml-training] progress step=120 total_steps=1000 loss=0.5 eta_s=2100\nmore noise\n"
        ),
    )
    kube.pod(run, 1, cs.running(), log="[vdk-ml-training] progress step=999 loss=9\n")  # only rank 0 counts
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert "progress   step 120/1000, loss 0.5, ETA 35m" in out
    assert json.loads(ok(vdk("show", "-n", "mnist-ddp", "-o", "json")).stdout)["latest"]["progress"]["step"] == 120


def test_list_and_show_read_the_progress_rank_0_posted_into_the_trainjob_s_kubeflow_status(kube, trainer_status_server):
    """Kubeflow Trainer's status server (over TLS, the token checked) applies what rank 0's poster sends as the
    TrainJob's status.trainerStatus; `vdk list` reads it from the TrainJob it lists anyway, `vdk show` prefers
    it to rank 0's log unless the log is further on (the posts stopped working)."""
    run = kube.deploy(backend="trainjob")
    name = run["metadata"]["name"]

    def apply(trainer_status):  # the server's server-side apply of its one field
        key = ("trainer.kubeflow.org/v1alpha1", "trainjobs", "ml", name)
        kube.status(run, **{**(kube.fake.objects[key].get("status") or {}), "trainerStatus": trainer_status})

    server = trainer_status_server(trainjob=name, on_accept=apply)
    kube.status(run, jobsStatus=[{"name": "node", "active": 2, "ready": 2}])
    rank_0 = kube.pod(run, 0, cs.running(), log="[vdk-ml-training] progress step=1/1000 loss=2.5 elapsed=3s\n")
    poster = StatusPoster(
        StatusSettings.from_env(server.env()),
        gpus=lambda: GpuFigures(gpus=8, source="gpm", sm_now=90.0, busy_gpu_s=640.0, sampled_gpu_s=800.0),
    )
    poster.offer(Figures(300, 1000, 0.25, 4.0, 75.0, 175.0))
    poster.close()
    assert [p.code for p in server.posts] == [200]

    kube.fake.requests.clear()
    out = ok(vdk("list")).stdout
    assert out.splitlines()[1].split()[-1] == "PROGRESS" and out.splitlines()[2].split()[-3:] == ["30%", "ETA", "2m55s"]
    assert not [
        p for _, p, _ in kube.fake.requests if "/pods" in p
    ]  # no log request, no pod list: the TrainJob says it
    entry = json.loads(ok(vdk("list", "-o", "json")).stdout)[0]
    assert (entry["progress"]["step"], entry["progress"]["percent"], entry["progress"]["source"]) == (
        300,
        30,
        "kubeflow",
    )
    shown = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert (
        "progress   step 300/1000, 30%, loss 0.25, ETA 2m55s, 4 steps/s, elapsed 1m15s, GPU utilisation 80.0%" in shown
    )
    assert "from the TrainJob's Kubeflow status of" in shown

    # rank 0 went on to step 900 and its posts stopped working: its log is further on, and says so
    kube.fake.set_log(rank_0["metadata"]["name"], "node", "[vdk-ml-training] progress step=900/1000 loss=0.1 eta=25s\n")
    shown = json.loads(ok(vdk("show", "-n", "mnist-ddp", "-o", "json")).stdout)["latest"]["progress"]
    assert (shown["step"], shown["source"]) == (900, "log")


def stall_lines(rank: str, seconds: float, last_step: int | None, collective: str | None, where: list[str]) -> list:
    """What the stall watchdog of a rank prints (runtime/watchdog.py), with its main thread at `where`."""
    return Stall(rank, seconds, last_step, collective, [("MainThread", where)]).lines()


def test_show_reports_a_stalled_run_with_the_rank_how_long_and_where_it_was(kube):
    run = kube.deploy(backend="job", nodes="3")
    kube.status(
        run,
        conditions=[{"type": "Failed", "status": "True", "reason": "PodFailurePolicy", "message": "exit code 1"}],
    )
    in_loader = ['  File "/opt/vdk-ml/job/data.py", line 88, in __next__', "    item = self.queue.get()"]
    in_loader += ['  File "/opt/vdk-ml/job/train.py", line 42, in train', "    batch = next(batches)"]
    waiting = ['  File "/opt/vdk-ml/job/train.py", line 51, in train', "    dist.all_reduce(grad)"]
    # rank 0 waited for rank 2 in all_reduce; rank 2 stopped stepping. torchrun ends each container with 1
    # after its rank's exit code 124, and each container's termination message is its rank's stall.
    kube.pod(
        run,
        0,
        cs.terminated(1, finished=295, message="\n".join(stall_lines("0", 1990, 1234, "all_reduce", waiting))),
        log="[vdk-ml-training] progress step=1234 loss=0.5\n",
    )
    kube.pod(run, 1, cs.terminated(143, finished=296))
    stalled = kube.pod(
        run,
        2,
        cs.terminated(1, finished=300, message="\n".join(stall_lines("2", 1800, 1234, None, in_loader)[:5])),
        log="\n".join(["epoch 3", *stall_lines("2", 1800, 1234, None, in_loader), "torchrun: exitcode : 124"]),
    )
    name, pod = run["metadata"]["name"], stalled["metadata"]["name"]

    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert f"Latest run {name}: Stalled" in out
    assert f"rank 2 stalled: no optimizer step for 30m (last step 1234) (pod {pod})" in out
    assert "-> see where it was (below)" in out and "raise `stall_timeout`" in out
    where = out.split("Where rank 2 was (most recent call first):\n")[1].splitlines()
    assert [line.strip() for line in where[:4]] == [line.strip() for line in in_loader]
    assert f"Last lines of the log (rank 2, pod {pod}):" in out and "| torchrun: exitcode : 124" in out

    latest = json.loads(ok(vdk("show", "-n", "mnist-ddp", "-o", "json")).stdout)["latest"]
    assert latest["phase"] == "Stalled"
    assert {k: latest["stall"][k] for k in ("rank", "duration", "last_step", "collective")} == {
        "rank": "2",
        "duration": "30m",
        "last_step": 1234,
        "collective": None,
    }
    assert latest["stall"]["top_frames"][:2] == in_loader[:2]
    # the full stacks come from the log: the termination message holds the top frames only
    assert latest["findings"][0]["stall"]["threads"][0]["frames"] == in_loader


def test_a_stall_found_only_in_the_log_of_a_restarted_rank(kube):
    run = kube.deploy(nodes="2")
    kube.status(run, conditions=[{"type": "Restarting", "status": "True", "message": "restarting"}])
    kube.pod(run, 0, cs.running(), log="[vdk-ml-training] progress step=9 loss=0.5\n")
    where = ['  File "/opt/vdk-ml/job/train.py", line 7, in <module>', "    time.sleep(3600)"]
    restarted = kube.pod(
        run,
        1,
        cs.running(restarts=1, last=cs.termination(1)),  # no termination message (another path was set)
        previous_log="\n".join(stall_lines("1", 3600, None, None, where)) + "\n",
    )
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    pod = restarted["metadata"]["name"]
    assert f"Latest run {run['metadata']['name']}: Restarting" in out  # restarting, not over: no Stalled
    assert (
        f"rank 1 stalled: no optimizer step for 1h (no step yet, startup_timeout) (pod {pod}, restarted 1 times)" in out
    )
    assert "time.sleep(3600)" in out.split("Where rank 1 was")[1]


def test_show_draws_the_loss_curve_of_rank_0_from_the_same_log_read(kube):
    run = kube.deploy(backend="job", nodes="1")
    kube.status(run, active=1)
    losses = [2.0, 1.5, 1.0, float("nan"), 0.5, 0.25]
    log = "".join(f"[vdk-ml-training] progress step={10 * i} loss={v}\nbatch {i}\n" for i, v in enumerate(losses, 1))
    pod = kube.pod(run, 0, cs.running(), log=log)
    kube.fake.requests.clear()
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert "  loss       █▆▄×▂▁  min 0.25 at step 60, last 0.25 at step 60, 1 not finite (×) (6 points)" in out
    assert len([p for m, p, _ in kube.fake.requests if p.endswith(f"/pods/{pod['metadata']['name']}/log")]) == 1
    curve = json.loads(ok(vdk("show", "-n", "mnist-ddp", "-o", "json")).stdout)["latest"]["loss_curve"]
    assert curve == [{"step": 10 * i, "loss": None if i == 4 else v} for i, v in enumerate(losses, 1)]


def test_a_diverged_loss_is_null_in_json_and_nan_in_text(kube):
    run = kube.deploy(backend="job", nodes="1")
    kube.status(run, active=1)
    kube.pod(run, 0, cs.running(), log="[vdk-ml-training] progress step=7 loss=nan\n")
    assert "progress   step 7, loss nan" in ok(vdk("show", "-n", "mnist-ddp")).stdout

    def reject(constant):
        raise ValueError(f"not strict JSON: {constant}")

    shown = json.loads(ok(vdk("show", "-n", "mnist-ddp", "-o", "json")).stdout, parse_constant=reject)
    assert shown["latest"]["progress"]["loss"] is None and shown["latest"]["progress"]["step"] == 7
    detail = json.loads(ok(vdk("execute", "--show", "-n", "mnist-ddp", "-o", "json")).stdout, parse_constant=reject)
    assert detail["progress"]["loss"] is None


def test_show_of_a_queued_run_quotes_kueue(kube):
    run = kube.deploy(queue="team-a-queue")
    kube.status(run, conditions=[{"type": "Suspended", "status": "True", "message": "PyTorchJob is suspended"}])
    quota = (
        "couldn't assign flavors to pod set master: "
        "insufficient unused quota for nvidia.com/gpu in flavor default-flavor, 16 more needed"
    )
    wl = kube.fake.add(
        "workloads",
        cs.workload(run, [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": quota}]),
    )
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert f"Latest run {run['metadata']['name']}: Queued" in out
    assert f"queued in team-a-queue (Kueue Workload {wl['metadata']['name']}): {quota}" in out


def test_show_of_an_unknown_job_says_what_exists(kube):
    kube.deploy()
    result = vdk("show", "-n", "no-such-job")
    assert result.exit_code == 1 and result.stdout == ""
    assert "there are no runs of no-such-job in namespace ml (context fake)" in result.stderr
    assert "`vdk list -a`" in result.stderr
    result = vdk("show")
    assert result.exit_code == 2 and "needs -n/--name" in result.stderr


def test_what_a_narrow_role_may_not_read_is_a_note_not_a_failure(kube):
    run = kube.deploy(backend="job", nodes="2")
    kube.pod(run, 0, cs.terminated(1), log="boom\n")
    kube.pod(run, 1, cs.unschedulable(GPU_FULL))
    kube.fake.forbidden |= {("list", "events"), ("get", "pods/log")}
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert "cannot be scheduled" in out and "exited with code 1" in out
    assert "note: events could not be read (403)" in out
    assert 'note: logs could not be read (403): pods "' in out and 'cannot get resource "pods/log"' in out
    kube.fake.forbidden.add(("list", "pods"))
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert "note: pods could not be read (403)" in out


# --- vdk execute --logs ------------------------------------------------------------------------------------


def test_logs_of_every_rank_with_pending_ranks_explained(kube):
    run = kube.deploy(nodes="4")
    kube.pod(run, 0, cs.running(), log="r0 a\nr0 b\n")
    kube.pod(
        run,
        1,
        cs.running(restarts=1, last=cs.termination(1)),
        log="r1 again\n",
        previous_log="r1 first try\nr1 crashed\n",
    )
    kube.pod(run, 2, cs.unschedulable(GPU_FULL))
    kube.pod(run, 3, cs.waiting("ContainerCreating", node="gpu-node-3"))
    result = ok(vdk("execute", "--logs", "-n", "mnist-ddp"))
    assert result.stdout.splitlines() == [
        "[rank 0] r0 a",
        "[rank 0] r0 b",
        "[rank 1, previous container] r1 first try",
        "[rank 1, previous container] r1 crashed",
        "[rank 1] r1 again",
    ]
    assert f"[rank 2] no log: cannot be scheduled: {GPU_FULL} — no node has that many free GPUs" in result.stderr
    assert "[rank 3] no log: starting on gpu-node-3 (pulling the image or mounting volumes)" in result.stderr

    logs = json.loads(ok(vdk("execute", "--logs", "-n", "mnist-ddp", "-o", "json")).stdout)
    assert logs["run"] == run["metadata"]["name"]
    assert [(r["rank"], r["log"], r["previous"]) for r in logs["ranks"]] == [
        ("0", "r0 a\nr0 b\n", None),
        ("1", "r1 again\n", "r1 first try\nr1 crashed\n"),
        ("2", None, None),
        ("3", None, None),
    ]
    assert logs["ranks"][2]["unavailable"].startswith("cannot be scheduled")


def test_logs_of_an_earlier_run_by_its_id(kube):
    old = kube.deploy(backend="job", nodes="1", created=cs.ago(3600))
    new = kube.deploy(backend="job", nodes="1", created=cs.ago(60))
    kube.pod(old, 0, cs.terminated(0, "Completed"), log="old run\n")
    kube.pod(new, 0, cs.running(), log="new run\n")
    assert ok(vdk("execute", "--logs", "-n", "mnist-ddp")).stdout == "[rank 0] new run\n"
    run_id = old["metadata"]["name"].rsplit("-", 1)[1]
    assert ok(vdk("execute", "--logs", "-n", "mnist-ddp", "-i", run_id)).stdout == "[rank 0] old run\n"
    assert ok(vdk("execute", "--logs", "-n", "mnist-ddp", "-i", old["metadata"]["name"])).stdout == "[rank 0] old run\n"
    result = vdk("execute", "--logs", "-n", "mnist-ddp", "-i", "zzzzzzzz")
    assert result.exit_code == 1 and "mnist-ddp of team Vision Research has no run mnist-ddp-zzzzzzzz" in result.stderr


def test_logs_of_a_queued_run_say_why_there_are_none(kube):
    run = kube.deploy(queue="team-a-queue")
    kube.status(run, conditions=[{"type": "Suspended", "status": "True"}])
    kube.fake.requests.clear()
    result = vdk("execute", "--logs", "-n", "mnist-ddp")
    assert result.exit_code == 1 and result.stdout == ""  # no log could be read: not a success
    assert f"{run['metadata']['name']} has no pods, so no logs: queued in team-a-queue" in result.stderr
    # the pods were listed once: saying why there are none does not list them again
    assert len([p for m, p, _ in kube.fake.requests if m == "GET" and p == "/api/v1/namespaces/ml/pods"]) == 1


def test_follow_of_a_run_without_pods_says_why_while_it_waits(kube, monkeypatch):
    monkeypatch.setattr(observe, "FOLLOW_POLL_SECONDS", 0.05)
    run = kube.deploy(backend="job", nodes="1", queue="team-a-queue")
    kube.status(run, conditions=[{"type": "Suspended", "status": "True"}])
    quota = (
        "couldn't assign flavors to pod set main: insufficient unused quota for nvidia.com/gpu in flavor default-flavor"
    )
    kube.fake.add(
        "workloads",
        cs.workload(run, [{"type": "QuotaReserved", "status": "False", "reason": "Pending", "message": quota}]),
    )
    results = {}
    # daemon: a failing assertion must not leave the test run waiting for this thread
    follower = threading.Thread(
        target=lambda: results.setdefault("r", vdk("execute", "--logs", "--follow", "-n", "mnist-ddp")), daemon=True
    )
    follower.start()
    try:
        deadline = time.monotonic() + 10
        while not [p for m, p, _ in kube.fake.requests if p.endswith("/workloads")]:  # it asked Kueue why
            assert time.monotonic() < deadline, "follow did not look for why the run has no pods"
            time.sleep(0.02)
        time.sleep(0.3)
        assert follower.is_alive(), "follow gave up on a run that has no pods yet"
        # admitted: the pod starts, logs, and the run ends
        kube.status(run, active=1)
        pod = kube.pod(run, 0, cs.running(), log="r0 step 1\n")
        time.sleep(0.3)
        kube.set_pod(pod, cs.terminated(0, "Completed"))
    finally:
        kube.status(run, conditions=[{"type": "Complete", "status": "True"}])
    follower.join(timeout=15)
    assert not follower.is_alive(), "follow did not end with the run"
    result = ok(results["r"])
    assert "[run] no pods yet: queued in team-a-queue (Kueue Workload " in result.stderr
    assert f"{quota} (waiting for them)" in result.stderr
    assert result.stdout == "[rank 0] r0 step 1\n"
    assert f"{run['metadata']['name']} Succeeded" in result.stderr


def test_follow_streams_every_rank_until_the_run_ends(kube, monkeypatch):
    monkeypatch.setattr(observe, "FOLLOW_POLL_SECONDS", 0.05)
    run = kube.deploy(backend="job", nodes="2")
    kube.status(run, active=2)
    p0 = kube.pod(run, 0, cs.running(), log="r0 start\n")
    p1 = kube.pod(run, 1, cs.unschedulable(GPU_FULL))
    results = {}
    follower = threading.Thread(
        target=lambda: results.setdefault("r", vdk("execute", "--logs", "--follow", "-n", "mnist-ddp")), daemon=True
    )
    follower.start()

    def until(condition, what):
        deadline = time.monotonic() + 10
        while not condition():
            assert time.monotonic() < deadline, f"timed out waiting for {what}"
            time.sleep(0.02)

    def reads_of(pod):
        return [
            q
            for m, p, q in kube.fake.requests
            if p.endswith(f"/pods/{pod['metadata']['name']}/log") and go_bool(q.get("follow"))
        ]

    until(lambda: reads_of(p0), "rank 0 to be followed")
    kube.fake.append_log(p0["metadata"]["name"], "pytorch", "r0 step 1\n")
    # rank 1 gets a node and starts
    kube.fake.set_log(p1["metadata"]["name"], "pytorch", "r1 start\n")
    kube.set_pod(p1, cs.running("gpu-node-2"))
    until(lambda: reads_of(p1), "rank 1 to be followed")
    kube.fake.append_log(p1["metadata"]["name"], "pytorch", "r1 step 1\n")
    time.sleep(0.2)
    # both finish; so does the run
    for pod in (p0, p1):
        kube.set_pod(pod, cs.terminated(0, "Completed"))
    kube.status(run, conditions=[{"type": "Complete", "status": "True"}])
    follower.join(timeout=15)
    assert not follower.is_alive(), "follow did not end with the run"
    result = ok(results["r"])
    assert [line for line in result.stdout.splitlines() if line.startswith("[rank 0]")] == [
        "[rank 0] r0 start",
        "[rank 0] r0 step 1",
    ]
    assert [line for line in result.stdout.splitlines() if line.startswith("[rank 1]")] == [
        "[rank 1] r1 start",
        "[rank 1] r1 step 1",
    ]
    assert f"[rank 1] cannot be scheduled: {GPU_FULL}" in result.stderr
    assert f"{run['metadata']['name']} Succeeded" in result.stderr
    # the runs were listed once, to pick the latest; every poll since read that run by its name
    run_lists = [
        p for m, p, _ in kube.fake.requests if m == "GET" and p.endswith(("/pytorchjobs", "/trainjobs", "/jobs"))
    ]
    assert run_lists == ["/apis/batch/v1/namespaces/ml/jobs"]
    assert [
        m for m, p, _ in kube.fake.requests if p == f"/apis/batch/v1/namespaces/ml/jobs/{run['metadata']['name']}"
    ].count("GET") > 1


# --- vdk execute --start / --cancel / --list / --show, vdk delete -----------------------------------------


def test_start_runs_a_past_run_again_exactly(kube):
    first = kube.deploy(backend="job", nodes="2", created=cs.ago(600))
    started = json.loads(
        ok(vdk("execute", "--start", "-n", "mnist-ddp", "-r", "same code, new data", "-o", "json")).stdout
    )
    new = started["run"]
    assert (
        started["rerun_of"] == first["metadata"]["name"]
        and started["image"] == IMAGE.reference
        and started["backend"] == "job"
    )
    assert new != first["metadata"]["name"] and new.startswith("mnist-ddp-")
    assert sorted(started["created"]) == sorted([f"Job/{new}", f"Service/{new}", f"ConfigMap/{new}-record"])
    again = kube.client.get("Job", new)
    assert again["spec"]["template"]["spec"]["containers"][0]["image"] == IMAGE.reference
    old_spec = json.dumps(first["spec"]["template"]["spec"]).replace(first["metadata"]["name"], new)
    assert json.loads(old_spec) == again["spec"]["template"]["spec"]
    annotations = again["metadata"]["annotations"]
    assert (
        annotations["vdk.io/rerun-of"] == first["metadata"]["name"]
        and annotations["vdk.io/reason"] == "same code, new data"
    )
    assert annotations["vdk.io/git-commit"] == first["metadata"]["annotations"]["vdk.io/git-commit"]
    # by default the latest run is re-run; -i picks another
    text = ok(vdk("execute", "--start", "-n", "mnist-ddp")).stdout
    assert f"a re-run of {new}" in text
    assert len(kube.run_names()) == 3


def test_cancel_stops_and_removes_one_run(kube):
    keep = kube.deploy(created=cs.ago(600))
    cancel = kube.deploy(created=cs.ago(60))
    out = ok(
        vdk("execute", "--cancel", "-n", "mnist-ddp", "-i", cancel["metadata"]["name"], "-t", "Vision Research")
    ).stdout
    assert f"Cancelled {cancel['metadata']['name']} of mnist-ddp of team Vision Research (was " in out
    assert kube.run_names() == [keep["metadata"]["name"]]
    assert kube.fake.run_objects() == sorted(
        [f"PyTorchJob/{keep['metadata']['name']}", f"ConfigMap/{keep['metadata']['name']}-record"]
    )


def test_cancel_without_a_run_cancels_the_latest_as_the_other_operations_default_to_it(kube):
    older = kube.deploy(created=cs.ago(600))
    latest = kube.deploy(created=cs.ago(60))
    kube.status(latest, conditions=[{"type": "Running", "status": "True"}])
    out = ok(vdk("execute", "--cancel", "-n", "mnist-ddp", "-t", "Vision Research")).stdout
    assert f"Cancelled {latest['metadata']['name']} of mnist-ddp" in out
    assert kube.run_names() == [older["metadata"]["name"]]
    # the latest run now is one that ended: cancelling it by default would only delete it, so it is refused
    kube.status(older, conditions=[{"type": "Succeeded", "status": "True"}])
    refused = vdk("execute", "--cancel", "-n", "mnist-ddp", "-t", "Vision Research")
    assert refused.exit_code == 1, refused.stderr
    assert (
        f"the latest run of mnist-ddp of team Vision Research, {older['metadata']['name']}, has ended (Succeeded)"
        in (refused.stderr)
    )
    assert "name the run to cancel with -i (`vdk execute --list -n mnist-ddp` lists them)" in refused.stderr
    assert kube.run_names() == [older["metadata"]["name"]]


def test_show_takes_a_run_as_execute_show_does(kube):
    older = kube.deploy(created=cs.ago(600), reason="first try")
    latest = kube.deploy(created=cs.ago(60), reason="second try")
    out = ok(vdk("show", "-n", "mnist-ddp", "-i", older["metadata"]["name"])).stdout
    assert "\nRun " in out and "Latest run" not in out
    assert "first try" in out.split("\nRun ", 1)[1] and "second try" not in out.split("\nRun ", 1)[1]
    assert latest["metadata"]["name"] in out  # still in the table of the job's runs
    shown = json.loads(ok(vdk("show", "-n", "mnist-ddp", "-i", older["metadata"]["name"][-8:], "-o", "json")).stdout)
    assert shown["latest"]["run"]["name"] == older["metadata"]["name"]
    unknown = vdk("show", "-n", "mnist-ddp", "-i", "nosuchrun")
    assert unknown.exit_code == 1 and "nosuchrun" in unknown.stderr


def test_execute_list_and_show(kube):
    a = kube.deploy(created=cs.ago(600))
    b = kube.deploy(created=cs.ago(60))
    listed = json.loads(ok(vdk("execute", "--list", "-n", "mnist-ddp", "-o", "json")).stdout)
    assert [r["name"] for r in listed] == [b["metadata"]["name"], a["metadata"]["name"]]
    assert a["metadata"]["name"] in ok(vdk("execute", "--list", "-n", "mnist-ddp")).stdout
    shown = json.loads(
        ok(vdk("execute", "--show", "-n", "mnist-ddp", "-i", a["metadata"]["name"], "-o", "json")).stdout
    )
    assert shown["run"]["name"] == a["metadata"]["name"]
    result = vdk("execute", "-n", "mnist-ddp")
    assert result.exit_code == 2 and "--start, --cancel, --list, --show, --logs or --outputs" in result.stderr
    result = vdk("execute", "--list", "--follow", "-n", "mnist-ddp")
    assert result.exit_code == 2 and "--follow goes with --logs (every rank's logs) or --show" in result.stderr


def test_delete_asks_then_removes_every_run_of_the_job(kube):
    runs = [kube.deploy(), kube.deploy(backend="job")]
    other = kube.deploy(job="bert-ft")
    declined = vdk("delete", "-n", "mnist-ddp", "-t", "Vision Research", input="n\n")
    assert declined.exit_code == 1
    assert "Delete these 2 runs of mnist-ddp of team Vision Research, their pods" in declined.stderr
    assert len(kube.run_names()) == 3
    kube.fake.requests.clear()
    ok(vdk("delete", "-n", "mnist-ddp", "-t", "Vision Research", input="y\n"))
    # the runs were listed once (one request per backend the job uses); each was then deleted by its name
    assert sorted(
        p for m, p, _ in kube.fake.requests if m == "GET" and p.endswith(("/pytorchjobs", "/trainjobs", "/jobs"))
    ) == ["/apis/batch/v1/namespaces/ml/jobs", "/apis/kubeflow.org/v1/namespaces/ml/pytorchjobs"]
    assert kube.run_names() == [other["metadata"]["name"]]
    assert not [o for o in kube.fake.run_objects() if any(r["metadata"]["name"] in o for r in runs)]
    ok(vdk("delete", "-n", "bert-ft", "-t", "Vision-Research", "--yes"))  # the label value names the same team
    assert kube.run_names() == [] and kube.fake.run_objects() == []


# --- cost for every other vdk command ---------------------------------------------------------------------


def test_importing_the_verbs_does_not_import_kubernetes():
    code = (
        "import sys; from vdk.plugin.ml_training.cli import commands; commands.ml_verbs(); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('kubernetes', 'urllib3', 'yaml') "
        "or m.startswith('vdk.plugin.ml_training.k8s')))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_a_run_without_pods_names_who_creates_them_for_its_backend(kube):
    """A plain Job has no operator: Kubernetes' Job controller creates its pods, and its events say why not."""
    job_run = kube.deploy(job="plain-job", backend="job", nodes="2")
    kube.status(job_run, active=0)
    out = ok(vdk("show", "-n", "plain-job")).stdout
    assert "no pods yet: Kubernetes' Job controller has not created them yet" in out
    assert f"kubectl describe job {job_run['metadata']['name']} -n ml" in out
    assert "operator" not in out.lower()
    operator_run = kube.deploy(job="operator-job", backend="pytorchjob", nodes="2")
    kube.status(operator_run, conditions=[{"type": "Created", "status": "True"}])
    out = ok(vdk("show", "-n", "operator-job")).stdout
    assert "no pods yet: the PyTorchJob operator has not created them" in out
    assert "check that the training operator is running" in out


def test_pods_that_may_not_be_listed_are_not_said_to_be_missing(kube):
    run = kube.deploy(backend="job", nodes="2")
    kube.pod(run, 0, cs.running())
    kube.pod(run, 1, cs.running())
    kube.fake.forbidden.add(("list", "pods"))
    out = ok(vdk("show", "-n", "mnist-ddp")).stdout
    assert "note: pods could not be read (403)" in out
    assert "no pods yet" not in out and "has not created them" not in out


def test_node_counts_are_numbers_in_json_and_elastic_ranges_have_both_ends(kube):
    kube.deploy(job="fixed", nodes="2")
    kube.deploy(job="elastic", nodes="2:4")
    listed = {e["job_name"]: e for e in json.loads(ok(vdk("list", "-o", "json")).stdout)}
    assert (listed["fixed"]["nodes_min"], listed["fixed"]["nodes"]) == (2, 2)
    assert (listed["elastic"]["nodes_min"], listed["elastic"]["nodes"]) == (2, 4)
    assert "2:4 x 8 GPU" in ok(vdk("list")).stdout
    shown = json.loads(ok(vdk("show", "-n", "elastic", "-o", "json")).stdout)
    for run in (shown["runs"][0], shown["latest"]["run"]):
        assert (run["nodes_min"], run["nodes"], run["gpus_per_node"]) == (2, 4, 8)
