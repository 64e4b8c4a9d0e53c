"""`vdk show`: the GPU panel of a run's nodes (their totals from the termination messages, node 0's figures so far
from its log while it runs), its start-up with its parts, the advice that names the change, and a run the idle
policy stopped; all from the requests `vdk show` makes anyway."""

from __future__ import annotations

import json

import pytest

from tests.support import cluster_state as cs
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.vdk_cli import vdk
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.runtime import progress_lines
from vdk.plugin.ml_training.runtime.gpu_lines import GIB
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.idle_policy import Idle

H100 = "NVIDIA H100 80GB HBM3"
START = cs.T0.timestamp()


@pytest.fixture
def kube(cluster, tmp_path):
    fake, client = cluster()

    def deploy(**keys) -> dict:
        spec = make_spec(tmp_path / "jobs", name="llm", **{"nodes": "2", "gpus_per_node": "1", **keys})
        return client.apply(render_run(spec, IMAGE, make_run(spec), "ml", "job"))[0]

    return fake, deploy


def figures(node: str, final: bool = True, **values) -> GpuFigures:
    """A node's H100 at 9% SM activity (11% at p95) with 8.1 GiB at most in use, for 2 h."""
    base = dict(
        node=node, gpus=1, model=H100, source="gpm", seconds=7200, sm_now=9.0, sm_mean=9.0, sm_p95=11.0,
        occupancy_mean=4.0, sm_gpus=(9.0,), mem_peak=int(8.1 * GIB), mem_total=int(79.6 * GIB), power_w=160.0,
        busy_gpu_s=0.09 * 4800, sampled_gpu_s=4800, window_gpu_s=4600, idle_gpu_s=460, started=START + 1920,
        first_step=START + 2400, last_step=START + 7100, steps=4000, spark="0001111111111111110", final=final,
    )  # fmt: skip
    return GpuFigures(**{**base, **values})


def ended_pod(run: dict, rank: int, message: str, exit_code: int = 0) -> dict:
    """A rank's pod as the kubelet leaves it: scheduled 2 min after the start, its container started after the
    image pull (32 min), ended at 2 h, with its termination message."""
    status = cs.terminated(exit_code, "Completed" if exit_code == 0 else "Error", finished=7200, message=message)
    status["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": cs.ts(120)}]
    status["containerStatuses"][0]["state"]["terminated"]["startedAt"] = cs.ts(1920)
    return cs.rank_pod(run, "job", rank, status)


def pulled(fake, pod: dict) -> None:
    fake.add(
        "events",
        cs.event(
            "Pod",
            pod["metadata"]["name"],
            "Pulled",
            f'Successfully pulled image "{IMAGE.reference}" in 30m0.52s (30m0.52s '
            "including waiting). Image size: 10200547328 bytes.",
            type_="Normal",
            last=cs.ts(1900),
        ),  # fmt: skip
    )


def test_a_finished_run_shows_each_node_s_gpus_its_start_up_and_what_to_change(kube):
    fake, deploy = kube
    run = deploy()
    name = run["metadata"]["name"]
    fake.set_status("jobs", name, {"startTime": cs.ts(0), "completionTime": cs.ts(7200), "succeeded": 2,
                                   "conditions": [{"type": "Complete", "status": "True"}]})  # fmt: skip
    last = progress_lines.format_line(4000, 4000, 0.31, 0.85, 4800, None, "finished", 100)
    for rank in (0, 1):
        message = (f"{last}\n" if rank == 0 else "") + figures(str(rank)).line()
        pod = fake.add("pods", ended_pod(run, rank, message))
        pulled(fake, pod)
    fake.requests.clear()
    out = vdk("show", "-n", "llm")
    assert out.exit_code == 0, out.stderr
    text = out.stdout
    assert "  GPUs       ▁▁▁▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▁  SM activity mean 9%, p95 11%; memory peak 8.1 of 79.6 GiB (10%)" in text
    panel = text.split("GPUs (each node's totals; SM activity (GPM SM_UTIL: the share of SMs busy)):\n")[1]
    rows = panel.splitlines()
    assert rows[0].split() == [
        "NODE", "POD", "GPUS", "SM", "MEAN", "SM", "P95", "MEMORY", "PEAK", "POWER", "IDLE", "ACTIVITY",
    ]  # fmt: skip
    assert rows[1].split()[0] == "0" and f"1 x {H100}" in rows[1] and "8.1 of 79.6 GiB (10%)" in rows[1]
    assert rows[1].split()[-4:] == ["160", "W", "10%", "▁▁▁▂▂▂▂▂▂▂▂▂▂▂▂▂▂▂▁"]
    assert rows[3] == (
        "  start-up 40m to the first optimizer step: waiting for nodes 2m, pulling the image 30m, loading before "
        "the first step 8m"
    )
    advice = text.split("What to change:\n")[1]
    assert (
        f"a whole {H100} per node, of which SM activity used 9% on average (11% at the 95th percentile) and memory "
        "at most 8.1 GiB of 79.6 GiB: a 1g.10gb slice (1/7 of the GPU, 9.8 GiB) would have done" in advice
    )
    assert (
        "-> set `gpus_per_node = 1g.10gb` in [ml-training]: it would have saved 3.4 of the run's 4.0 GPU-hours"
        in advice
    )
    assert "start-up took 40m of the run's 2h (33%) before the first optimizer step" in advice
    assert "-> the image (9.5 GiB) was pulled on 2 nodes for this run" in advice
    # no request of its own: the job's records, the run, its pods, the events, rank 0's log, the run's record
    kinds = sorted(p.rsplit("/", 1)[-1] for _, p, _ in fake.requests)
    kinds = sorted("record" if k.startswith("llm-") and k.endswith("-record") else k for k in kinds)
    assert kinds == ["configmaps", "events", "jobs", "log", "pods", "record"]

    latest = json.loads(vdk("show", "-n", "llm", "-o", "json").stdout)["latest"]
    nodes = latest["gpus"]["nodes"]
    assert [(n["rank"], n["source"], n["final"]) for n in nodes] == [("0", "gpm", True), ("1", "gpm", True)]
    assert latest["startup"] == {"seconds": 2400.0, "waiting": 120.0, "pulling": pytest.approx(1800.52),
                                 "pulled_nodes": 2, "loading": 480.0, "image_bytes": 10200547328}  # fmt: skip
    assert [f["kind"] for f in latest["findings"]] == ["advice", "advice"]


def test_a_well_sized_run_gets_its_panel_and_no_advice(kube):
    fake, deploy = kube
    run = deploy(nodes="1")
    done = {
        "startTime": cs.ts(0),
        "completionTime": cs.ts(7200),
        "conditions": [{"type": "Complete", "status": "True"}],
    }
    fake.set_status("jobs", run["metadata"]["name"], done)
    busy = figures("0", sm_mean=88.0, sm_p95=97.0, mem_peak=int(70 * GIB), first_step=START + 300)
    fake.add("pods", ended_pod(run, 0, busy.line()))
    text = vdk("show", "-n", "llm").stdout
    assert "SM activity mean 88%, p95 97%; memory peak 70.0 of 79.6 GiB (88%)" in text
    assert "What to change" not in text


def test_a_running_run_shows_node_0_s_figures_so_far_from_its_log(kube):
    fake, deploy = kube
    run = deploy()
    fake.set_status("jobs", run["metadata"]["name"], {"startTime": cs.ago(3600), "active": 2})
    so_far = [figures("0", final=False, sm_now=40.0 + i, sm_mean=50.0 + i).line() for i in range(3)]
    log = "\n".join(["[vdk-ml-training] progress step=10 loss=0.9", so_far[0], so_far[1], "noise", so_far[2]])
    pod = fake.add("pods", cs.rank_pod(run, "job", 0, cs.running()))
    fake.set_log(pod["metadata"]["name"], cs.CONTAINER["job"], log + "\n")
    text = vdk("show", "-n", "llm").stdout
    assert "SM activity mean 52%, p95 11%; memory peak 8.1 of 79.6 GiB (10%)" in text
    assert "(so far, node 0)" in text and "GPUs (node 0's figures so far;" in text
    assert "What to change" not in text  # advice once the run has ended


def test_a_run_the_idle_policy_stopped_says_so_and_where_it_was(kube):
    fake, deploy = kube
    run = deploy(nodes="1")
    fake.set_status("jobs", run["metadata"]["name"], {"startTime": cs.ts(0), "failed": 1,
                                                      "conditions": [{"type": "Failed", "status": "True",
                                                                      "message": "BackoffLimitExceeded"}]})  # fmt: skip
    where = ('  File "/opt/vdk-ml/job/train.py", line 42, in train', "    batch = next(batches)")
    idle = Idle("0", 7200, 5.0, 1234, "0", (("MainThread", where),))
    message = "\n".join(idle.lines(8, training_thread_only=True)) + "\n" + figures("0", sm_mean=1.0).line()
    pod = fake.add("pods", ended_pod(run, 0, message, exit_code=1))
    text = vdk("show", "-n", "llm").stdout
    assert (
        "stopped by idle_timeout: every GPU of node 0 below 5% SM activity for 2h (last step 1234) "
        f"(pod {pod['metadata']['name']})" in text
    )
    assert "raise `idle_timeout`" in text and "batch = next(batches)" in text.split("Where rank 0 was")[1]
    latest = json.loads(vdk("show", "-n", "llm", "-o", "json").stdout)["latest"]
    assert latest["phase"] == "Failed" and latest["findings"][0]["idle"]["last_step"] == 1234
