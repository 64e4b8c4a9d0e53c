"""GPU-hours and waste from runs with known times: running, succeeded (with time after its last optimizer
step), failed, stalled, cancelled (a deleted run's usage record), MIG slices, several nodes; the window
a report covers."""

from datetime import timedelta

import pytest

from tests.support import cluster_state as cs
from tests.support.busy_namespace import operator_status
from tests.support.specs import IMAGE
from tests.support.specs import make_run
from tests.support.specs import make_spec
from tests.support.specs import trainer_cluster
from vdk.plugin.ml_training.k8s import gpu_hours
from vdk.plugin.ml_training.k8s.manifests import render_run
from vdk.plugin.ml_training.k8s.runs.summary import summarize
from vdk.plugin.ml_training.runtime import progress_lines
from vdk.plugin.ml_training.runtime.watchdog import Stall

NOW = cs.T0 + timedelta(days=2)
HOUR = 3600


@pytest.mark.parametrize(
    "resource, share",
    [
        ("nvidia.com/gpu", 1),
        ("amd.com/gpu", 1),
        ("nvidia.com/mig-1g.10gb", 1 / 7),  # A100 80GB, H100
        ("nvidia.com/mig-3g.40gb", 3 / 7),
        ("nvidia.com/mig-7g.80gb", 1),
        ("nvidia.com/mig-1g.20gb", 1 / 7),  # one compute slice with twice the memory
        ("nvidia.com/mig-1c.3g.40gb", 1 / 7),  # a compute instance of 1 slice in a 3-slice GPU instance
        ("nvidia.com/mig-2g.12gb", 2 / 4),  # A30: 4 slices
        ("nvidia.com/mig-1g.6gb+me", 1 / 4),
        (None, 0),
    ],
)
def test_a_mig_slice_counts_as_its_share_of_a_gpu(resource, share):
    assert gpu_hours.gpu_share(resource) == pytest.approx(share)


class Runs:
    """Runs as their operators leave them (rendered, with status and pods), and their summaries."""

    def __init__(self, root):
        self.root, self.summaries, self.pods = root, [], []

    def run(self, job, backend, phase, started, ended=None, team="vision", pods=(), **keys):
        spec = make_spec(self.root / f"{job}-{len(self.summaries)}", name=job, team=team, **keys)
        main = render_run(spec, IMAGE, make_run(spec), "ml", backend, trainer_cluster("runtimePatches"))[0]
        main["metadata"]["creationTimestamp"] = cs.ts(started)
        nodes = int(keys.get("nodes", "1"))
        main["status"] = operator_status(backend, phase, started, ended, nodes) if phase else {}
        self.summaries.append(summarize(main))
        self.pods += [cs.rank_pod(main, backend, rank, state) for rank, state in pods]
        return self.summaries[-1]


def last_line(after_last_step: float) -> str:
    return progress_lines.format_line(5000, 5000, 0.25, 2.0, 36000, None, "finished", after_last_step)


def test_gpu_hours_and_waste_of_runs_with_known_times(tmp_path):
    runs = Runs(tmp_path)
    # 2 nodes x 8 GPUs for 10 h; the script ran 30 min after its last optimizer step (its last progress line)
    done = [(0, cs.terminated(0, "Completed", finished=10 * HOUR, message=last_line(1800)))]
    runs.run("mnist", "pytorchjob", "Succeeded", 0, 10 * HOUR, nodes="2", gpus_per_node="8", pods=done)
    runs.run("mnist", "job", "Failed", HOUR, 3 * HOUR, nodes="1", gpus_per_node="4")  # 4 GPUs, 2 h
    # 3 nodes x 8 GPUs for 1 h, stopped by the stall watchdog
    stalled = [(1, cs.terminated(1, finished=HOUR, message="\n".join(Stall("9", 1800, 77, None).lines())))]
    runs.run("bert", "pytorchjob", "Failed", 0, HOUR, team="nlp", nodes="3", gpus_per_node="8", pods=stalled)
    # 2 nodes of one 1g.10gb MIG slice, running for 7 h
    start = (NOW - cs.T0).total_seconds() - 7 * HOUR
    runs.run("bert", "trainjob", "Running", start, team="nlp", nodes="2", gpus_per_node="1g.10gb")
    queued = runs.run("bert", "job", None, 0, team="nlp", nodes="1", gpus_per_node="8")  # never started
    assert queued.started is None
    # a run on 4 GPUs that `vdk execute --cancel` deleted after 30 minutes: its usage record
    cancelled = gpu_hours.RunUsage(
        "bert-x", "bert", "nlp", "nlp", "job", "running", NOW - timedelta(hours=1), None, 4.0
    )
    record = gpu_hours.usage_record(cancelled, "ml", "ada@example.com", NOW - timedelta(minutes=30))

    report = gpu_hours.report(runs.summaries, runs.pods, [record], NOW)
    outcomes = sorted((u.job, u.outcome, u.gpus) for u in report.runs)
    assert outcomes == [
        ("bert", "cancelled", 4.0),
        ("bert", "running", pytest.approx(2 / 7)),
        ("bert", "stalled", 24.0),
        ("mnist", "failed", 4.0),
        ("mnist", "succeeded", 16.0),
    ]
    teams = dict(report.by_team())
    assert teams["vision"].gpu_hours == pytest.approx(16 * 10 + 4 * 2)
    assert teams["vision"].wasted == pytest.approx(16 * 0.5 + 4 * 2)  # after the last step, and the failed run
    assert (teams["vision"].failed, teams["vision"].after_last_step) == (pytest.approx(8), pytest.approx(8))
    assert teams["nlp"].gpu_hours == pytest.approx(24 + 2 / 7 * 7 + 4 * 0.5)
    assert (teams["nlp"].stalled, teams["nlp"].cancelled) == (pytest.approx(24), pytest.approx(2))
    totals = report.totals()
    assert (totals.runs, totals.gpu_hours, totals.wasted) == (5, pytest.approx(196), pytest.approx(42))
    assert totals.wasted_share == pytest.approx(42 / 196)
    assert any(n.startswith("1 run not started") for n in report.notes) and any(
        "still running" in n for n in report.notes
    )

    data = report.to_dict()
    (bert,) = [j for j in data["jobs"] if j["job"] == "bert"]
    assert (bert["team"], bert["runs"], bert["stalled"]) == ("nlp", 3, 24.0)
    assert [r["outcome"] for r in bert["run_usage"]] == ["stalled", "running", "cancelled"]  # by start
    assert data["totals"]["wasted_share"] == round(42 / 196, 4)


def test_a_window_counts_the_hours_inside_it_and_says_which_runs_may_be_gone(tmp_path):
    runs = Runs(tmp_path)
    runs.run("mnist", "job", "Succeeded", 0, 10 * HOUR, nodes="1", gpus_per_node="2", ttl_after_finished="1d")
    # the last 10 hours at 15 h after it started: its hours 5 to 10
    report = gpu_hours.report(runs.summaries, [], [], cs.T0 + timedelta(hours=15), since_seconds=10 * HOUR)
    assert report.totals().gpu_hours == pytest.approx(2 * 5)
    everything = gpu_hours.report(runs.summaries, [], [], NOW)
    assert everything.since == cs.T0 and everything.totals().gpu_hours == pytest.approx(20)
    assert everything.complete_from == NOW - timedelta(days=1)
    assert any("deleted with their records 1d after they end" in n for n in everything.notes)
    after = gpu_hours.report(runs.summaries, [], [], NOW, since_seconds=HOUR)
    assert after.runs == [] and after.totals().gpu_hours == 0


def test_a_usage_record_keeps_a_deleted_run_until_it_would_have_expired():
    ended = gpu_hours.RunUsage(
        "a-1", "a", None, None, "job", "succeeded", cs.T0, cs.T0 + timedelta(hours=2), 8.0, 60.0, 86400
    )
    record = gpu_hours.usage_record(ended, "ml", "ada", cs.T0 + timedelta(hours=3))
    assert record["metadata"]["name"] == "a-1-usage"
    assert record["metadata"]["labels"] == {
        "vdk.io/job-name": "a",
        "vdk.io/usage-of": "a-1",
        "app.kubernetes.io/managed-by": "vdk-ml-training",
        "vdk.io/backend": "job",
    }  # no vdk.io/run: it is no part of a run, and outlives it
    read, expires = gpu_hours.parse_usage_record(record)
    assert read == ended and expires == cs.T0 + timedelta(hours=3, days=1)
    assert gpu_hours.report([], [], [record], expires + timedelta(seconds=1)).runs == []  # expired: not counted
    assert gpu_hours.parse_usage_record({"data": {"gpu_hours.json": "{"}}) is None
    still = gpu_hours.RunUsage("b-1", "b", None, None, "job", "running", cs.T0, None, 1.0)
    cancelled, _ = gpu_hours.parse_usage_record(gpu_hours.usage_record(still, "ml", "ada", cs.T0 + timedelta(hours=1)))
    assert (cancelled.outcome, cancelled.end) == ("cancelled", cs.T0 + timedelta(hours=1))


def gpu_line(gpus: int, first_step_at: float, busy: float, window: float, idle: float) -> str:
    """A node's GPU totals (runtime/gpu_lines.py) as its sampler leaves them in the termination message."""
    from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures

    started = cs.T0.timestamp()
    return GpuFigures(
        node="0", gpus=gpus, model="NVIDIA H100 80GB HBM3", source="gpm", sm_mean=40.0, busy_gpu_s=busy,
        sampled_gpu_s=gpus * 36000, window_gpu_s=window, idle_gpu_s=idle, started=started + 60,
        first_step=started + first_step_at, final=True,
    ).line()  # fmt: skip


def test_waste_by_cause_of_a_measured_run(tmp_path):
    runs = Runs(tmp_path)
    # 1 node x 8 GPUs for 10 h: first step after 1 h, 30 min after the last one, idle a quarter of the time
    # between, SM activity 40% of its allocated GPU-hours
    message = last_line(1800) + "\n" + gpu_line(8, HOUR, 0.4 * 8 * 10 * HOUR, window=1000, idle=250)
    done = [(0, cs.terminated(0, "Completed", finished=10 * HOUR, message=message))]
    runs.run("llm", "job", "Succeeded", 0, 10 * HOUR, nodes="1", gpus_per_node="8", pods=done)
    runs.run("llm", "job", "Failed", 10 * HOUR, 11 * HOUR, nodes="1", gpus_per_node="8")  # unmeasured, 8 h
    report = gpu_hours.report(runs.summaries, runs.pods, [], NOW)
    (measured,) = [u for u in report.runs if u.outcome == "succeeded"]
    assert (measured.startup, measured.idle_share, measured.utilisation) == (HOUR, 0.25, pytest.approx(0.4))
    causes = measured.causes(report.since, report.now)
    assert causes == {
        "used": pytest.approx(51),  # 80 - 8 start-up - 4 after the last step = 68, of which a quarter idle
        "idle": pytest.approx(17),
        "startup": pytest.approx(8),
        "after_last_step": pytest.approx(4),
        "redone": 0.0,  # it never restarted
        "failed": 0.0,
        "stalled": 0.0,
        "cancelled": 0.0,
        "running": 0.0,
    }
    assert sum(causes.values()) == pytest.approx(measured.hours(report.since, report.now))
    totals = report.totals()
    assert (totals.gpu_hours, totals.used, totals.failed) == (pytest.approx(88), pytest.approx(51), pytest.approx(8))
    assert totals.wasted == pytest.approx(17 + 8 + 4 + 8)
    # the utilisation is of the measured run only: the failed one had no GPU figures
    assert (totals.busy, totals.measured, totals.utilisation) == (pytest.approx(32), pytest.approx(80), 0.4)
    data = report.to_dict()
    assert data["totals"]["utilisation"] == 0.4 and data["totals"]["idle"] == pytest.approx(17)
    run = next(r for r in data["jobs"][0]["run_usage"] if r["outcome"] == "succeeded")
    assert run["gpu_hours_by_cause"]["startup"] == pytest.approx(8) and run["startup_seconds"] == HOUR
    # a deleted run's usage record keeps what was measured
    record = gpu_hours.usage_record(measured, "ml", "ada", NOW)
    assert gpu_hours.parse_usage_record(record)[0] == measured


def test_the_steps_a_restart_redid_are_wasted_at_the_rate_the_ended_attempt_trained(tmp_path):
    runs = Runs(tmp_path)
    # 1 node x 8 GPUs for 10 h, its pod preempted at step 1400 (2 steps/s) after its last checkpoint at step 1000:
    # the next pod resumed at 1000, so 400 steps (200 s) were trained again; a pod that failed at step 700 (its
    # rate 1 step/s) before it, whose next pod started over: 700 s more
    stopped = cs.terminated(143, finished=5 * HOUR, message=progress_lines.format_line(1400, 5000, 0.4, 2.0))
    stopped["conditions"] = [{"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}]
    failed = cs.terminated(1, finished=HOUR, message=progress_lines.format_line(700, 5000, 0.9, 1.0))
    started_over = progress_lines.format_line(1300, 5000, 0.5, 2.0)
    resumed = progress_lines.format_line(5000, 5000, 0.25, 2.0, 36000, None, "finished", 0, "checkpoint-1000@1000")
    pods = [failed, cs.terminated(143, finished=5 * HOUR, message=started_over), stopped]
    pods = [(0, {**state}) for state in pods] + [
        (0, cs.terminated(0, "Completed", finished=10 * HOUR, message=resumed))
    ]
    runs.run("llm", "job", "Succeeded", 0, 10 * HOUR, nodes="1", gpus_per_node="8", pods=pods)
    for i, pod in enumerate(runs.pods):  # created in that order
        pod["metadata"]["creationTimestamp"] = cs.ts(i * 60)
    report = gpu_hours.report(runs.summaries, runs.pods, [], NOW)
    (usage,) = report.runs
    causes = usage.causes(report.since, report.now)
    # 700 s (the first pod's steps at 1 step/s; its next began again) + 1300 steps at 2/s of the second (the third
    # began again) + 400 steps at 2/s of the third (the last resumed at 1000)
    assert usage.redone == pytest.approx(700 + 650 + 200)
    assert causes["redone"] == pytest.approx(8 * 1550 / HOUR)
    assert causes["used"] == pytest.approx(80 - 8 * 1550 / HOUR)
    assert report.totals().redone == pytest.approx(8 * 1550 / HOUR) and report.totals().wasted == causes["redone"]
    assert gpu_hours.parse_usage_record(gpu_hours.usage_record(usage, "ml", "ada", NOW))[0].redone == usage.redone


def test_a_window_cuts_the_causes_where_they_fall(tmp_path):
    runs = Runs(tmp_path)
    message = last_line(1800) + "\n" + gpu_line(8, HOUR, 0.4 * 8 * 10 * HOUR, window=1000, idle=0)
    done = [(0, cs.terminated(0, "Completed", finished=10 * HOUR, message=message))]
    runs.run("llm", "job", "Succeeded", 0, 10 * HOUR, nodes="1", gpus_per_node="8", pods=done)
    # the last 5 hours of the run only: no start-up in them, the 30 min after the last step all in
    report = gpu_hours.report(runs.summaries, runs.pods, [], cs.T0 + timedelta(hours=10), since_seconds=5 * HOUR)
    totals = report.totals()
    assert (totals.gpu_hours, totals.startup, totals.after_last_step) == (pytest.approx(40), 0.0, pytest.approx(4))
    assert totals.used == pytest.approx(36)
