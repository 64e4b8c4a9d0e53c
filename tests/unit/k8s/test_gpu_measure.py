"""A run's GPU figures from its pods (each node's totals in its termination message, node 0's figures so far in
its log) and its start-up from the pods' times and the kubelet's Pulled events."""

from __future__ import annotations

import pytest

from tests.support import cluster_state as cs
from vdk.plugin.ml_training.diagnosis.evidence import Event
from vdk.plugin.ml_training.k8s import gpu_measure
from vdk.plugin.ml_training.k8s.runs.pod_states import pod_state
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures

RUN = {"metadata": {"name": "llm-abc", "labels": {"vdk.io/run": "llm-abc", "vdk.io/backend": "job"}}}
START = cs.T0.timestamp()


def pod(rank: int, status: dict) -> dict:
    return cs.rank_pod(RUN, "job", rank, status)


def totals(node: str, **values) -> str:
    return GpuFigures(node=node, gpus=4, source="gpm", busy_gpu_s=7200.0, window_gpu_s=1000.0, idle_gpu_s=100.0,
                      final=True, **values).line()  # fmt: skip


def test_each_node_s_totals_come_from_its_termination_message_the_previous_container_s_too():
    last = "[vdk-ml-training] progress step=9\n"
    pods = [
        pod(0, cs.terminated(0, "Completed", message=last + totals("0", first_step=START + 300))),
        pod(1, cs.running(restarts=1, last=cs.termination(1, message=totals("1", first_step=START + 200)))),
        pod(2, cs.terminated(137, "OOMKilled")),  # killed: no totals
    ]  # fmt: skip
    ranks = [pod_state(p, "job") for p in pods]
    found = gpu_measure.run_gpus(ranks, ["ignored while nodes have totals"])
    assert [n.rank for n in found.nodes] == ["0", "1"] and not found.live
    assert found.first_step == START + 200
    assert found.idle_share == pytest.approx(0.1)
    assert found.utilisation(3600) == pytest.approx(7200 * 2 / (8 * 3600))


def test_while_no_node_has_ended_node_0_s_figures_so_far_come_from_its_log():
    ranks = [pod_state(pod(0, cs.running()), "job")]
    so_far = GpuFigures(node="0", gpus=1, sm_mean=42.0).line()
    found = gpu_measure.run_gpus(ranks, ["noise", so_far])
    assert found.live and found.nodes[0].figures.sm_mean == 42.0
    assert gpu_measure.run_gpus(ranks, ["no gpu line"]) is None


def test_the_start_up_and_its_parts():
    status = cs.terminated(0, "Completed", message=totals("0"))
    status["conditions"] = [{"type": "PodScheduled", "status": "True", "lastTransitionTime": cs.ts(90)}]
    status["containerStatuses"][0]["state"]["terminated"]["startedAt"] = cs.ts(700)
    pods = [pod(0, status)]
    ranks = [pod_state(p, "job") for p in pods]
    events = [
        Event(
            "Normal",
            "Pulled",
            "Pod/x",
            'Successfully pulled image "r/i@sha256:1" in 9m59.5s (10m including '
            "waiting). Image size: 5368709120 bytes.",
            1,
            None,
        ),  # fmt: skip
        Event("Normal", "Pulled", "Pod/y", 'Container image "r/i@sha256:1" already present on machine', 1, None),
        Event(
            "Normal",
            "Pulled",
            "Pod/z",
            'Successfully pulled image "r/i@sha256:1" in 850ms (850ms including '
            "waiting). Image size: 5368709120 bytes.",
            1,
            None,
        ),  # fmt: skip
    ]
    startup = gpu_measure.startup(cs.ts(0), START + 1000, ranks, pods, events)
    assert (startup.seconds, startup.waiting, startup.loading) == (1000, 90, 300)
    assert (startup.pulling, startup.pulled_nodes, startup.image_bytes) == (599.5, 2, 5368709120)
    assert gpu_measure.startup(None, START, ranks, pods) is None
    assert gpu_measure.startup(cs.ts(0), None, ranks, pods) is None
