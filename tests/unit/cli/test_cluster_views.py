"""How runs look on the terminal: the loss sparkline of `vdk show`."""

import math
from datetime import datetime
from datetime import timezone

from vdk.plugin.ml_training.cli.cluster_views import SPARK_WIDTH
from vdk.plugin.ml_training.cli.cluster_views import jobs_text
from vdk.plugin.ml_training.cli.cluster_views import loss_text
from vdk.plugin.ml_training.cli.cluster_views import outputs_text
from vdk.plugin.ml_training.cli.cluster_views import restarts_table
from vdk.plugin.ml_training.cli.cluster_views import sparkline
from vdk.plugin.ml_training.k8s.runs.restarts import Restart
from vdk.plugin.ml_training.runtime.progress_lines import Progress


def test_a_sparkline_scales_from_the_lowest_to_the_highest_loss():
    assert sparkline([8, 7, 6, 5, 4, 3, 2, 1]) == "█▇▆▅▄▃▂▁"
    assert sparkline([1.0, 1.0, 1.0]) == "▄▄▄"  # nothing to scale: the middle
    assert sparkline([3, float("nan"), 1, float("inf")]) == "█×▁×"
    assert sparkline([float("nan")] * 3) == "×××"
    assert sparkline([8, 1, float("nan")], unicode=False) == "#_x"


def test_a_long_curve_is_drawn_as_the_means_of_as_many_buckets_as_the_line_is_wide():
    values = [1000 - i for i in range(1000)]
    line = sparkline(values)
    assert len(line) == SPARK_WIDTH and line[0] == "█" and line[-1] == "▁"
    assert list(line) == sorted(line, reverse=True)
    nan_in_bucket = values[:500] + [math.nan] + values[501:]
    assert sparkline(nan_in_bucket)[20] == "×"  # a NaN anywhere in a bucket shows


def test_the_loss_line_says_the_minimum_and_the_last_value():
    points = [(10, 2.0), (20, 0.5), (30, float("nan")), (40, 0.75)]
    assert loss_text(points, unicode=True) == (
        "█▁×▂  min 0.5 at step 20, last 0.75 at step 40, 1 not finite (×) (4 points)"
    )
    assert loss_text(points, unicode=False).startswith("#_x.  ")
    assert loss_text([(1, 1.5), (2, float("nan"))], unicode=True) == (
        "▄×  min 1.5 at step 1, last nan at step 2, 1 not finite (×) (2 points)"
    )


def test_vdk_list_has_a_progress_column_when_a_latest_run_s_status_says_its_progress():
    def entry(job, progress=None):
        return {
            "job_name": job,
            "job_team": "vision",
            "latest_run": f"{job}-k3x9p2qa",
            "backend": "trainjob",
            "phase": "Running",
            "created": None,
            "nodes": 2,
            "nodes_min": 2,
            "gpus_per_node": 8,
            "gpu_resource": "nvidia.com/gpu",
            "runs": 1,
            "progress": progress,
        }

    reported = Progress(120, 1000, 0.43, "6m14s", {}, "", percent=12, source="kubeflow").to_dict()
    lines = jobs_text([entry("bert"), entry("mnist", reported)], "namespace ml").splitlines()
    assert lines[1].split()[-2:] == ["RUNS", "PROGRESS"]
    assert lines[2].split()[-1] == "-" and lines[3].split()[-3:] == ["12%", "ETA", "6m14s"]
    assert "PROGRESS" not in jobs_text([entry("bert")], "namespace ml")  # no status says any: no column


def test_the_restarts_table_says_each_cause_whether_it_counted_and_the_steps_redone():
    now = datetime(2026, 1, 2, 4, 0, 0, tzinfo=timezone.utc)
    rows = [
        Restart(
            "0",
            "run-0-a",
            "preempted",
            "PreemptionByScheduler: x",
            "2026-01-02T03:58:00Z",
            False,
            reached=42,
            resumed=40,
        ),
        Restart("1", "run-master-0", "OOMKilled", "OOMKilled (exit code 137)", "2026-01-02T03:30:00Z", True, times=3),
        Restart("?", "run-node-0-1", "evicted", "Evicted: low on memory", None, None),
    ]
    lines = restarts_table(rows, now).splitlines()
    assert lines[0].split() == ["AGE", "RANK", "POD", "CAUSE", "COUNTED", "STEPS", "REDONE", "WHAT", "SAID", "SO"]
    assert lines[1].split()[:7] == ["2m", "0", "run-0-a", "preempted", "no", "2", "(42"]
    assert "OOMKilled x3" in lines[2] and " yes " in lines[2] and lines[2].split()[6] == "-"
    assert "runtime's policy" in lines[3]


def test_vdk_list_says_a_sweep_is_a_sweep_and_keeps_its_phase_short():
    sweep = {
        "trials": 8, "parallel": 2, "done": 3, "running": 2, "pruned": 1, "failed": 0, "metric": "val_loss",
        "best_trial": 4, "best_metric": 0.41234, "stopped": None,
    }  # fmt: skip
    row = {
        "job_name": "lr-sweep", "job_team": "vision", "latest_run": "lr-sweep-k3x9p2qa", "backend": "job",
        "phase": "Running", "created": None, "nodes": 2, "nodes_min": 2, "gpus_per_node": 1,
        "gpu_resource": "nvidia.com/gpu", "runs": 1, "progress": None, "sweep": sweep,
    }  # fmt: skip
    line = jobs_text([row], "namespace ml").splitlines()[2]
    assert line.split()[3] == "sweep"  # its trials are a batch Job: `-o json` says `job`, the table what it is
    assert "1 x 1 GPU per trial" in line and "2 x 1 GPU" not in line  # its 2 pods are 2 trials, not 2 nodes
    phase = "Running (3/8 done, 2 at a time, best 0.41234)"
    assert phase in line and "pruned" not in line  # the whole tally is vdk show's: the cell was ~100 characters
    unknown = dict(row, sweep={"trials": 8, "parallel": 2, "why": "its study has not printed its table yet"})
    assert "Running (trials not known yet, 2 at a time)" in jobs_text([unknown], "namespace ml")


def test_a_run_s_outputs_are_counted_and_sized_as_people_read_them():
    one = outputs_text({"claim": "ml-outputs", "directory": "mnist-ddp-k3x9p2qa", "files": 1, "bytes": 4500})
    assert one.endswith(": 1 file, 4.5 KB when rank 0's script ended")  # it said `1 files`
    many = outputs_text({"claim": "ml-outputs", "directory": "d", "files": 3, "bytes": 67108864})
    assert many.endswith(": 3 files, 67.1 MB when rank 0's script ended")
