"""A TrainJob's Kubeflow status, without a server: the payload rank 0 posts (checked against the upstream CRD's
schema, integers where the API has int32), reading a status back (this plugin's and transformers' callback's),
when the plugin is the writer, and the poster's pace, its final post, its failures and that the training thread
never waits on it (with a stand-in for the network). The real TLS server, token files and training processes:
tests/integration/runtime/test_kubeflow_status_posts.py."""

from __future__ import annotations

import io
import json
import math
import threading
import types

import pytest

from tests.support.crd_schema import trainer_status_schema
from vdk.plugin.ml_training.runtime import kubeflow_status
from vdk.plugin.ml_training.runtime import post_import
from vdk.plugin.ml_training.runtime.gpu_lines import GIB
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.kubeflow_status import PostFailed
from vdk.plugin.ml_training.runtime.kubeflow_status import StatusPoster
from vdk.plugin.ml_training.runtime.kubeflow_status import StatusSettings
from vdk.plugin.ml_training.runtime.kubeflow_status import parse_trainer_status
from vdk.plugin.ml_training.runtime.kubeflow_status import trainer_status
from vdk.plugin.ml_training.runtime.progress_lines import Figures

NOW = 1767323045.0  # 2026-01-02T03:04:05Z
URL = "https://kubeflow-trainer-controller-manager.kubeflow-system.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/ml/trainjobs/run/status"
GPUS = GpuFigures(
    gpus=8, source="gpm", sm_now=88.04, busy_gpu_s=710.0, sampled_gpu_s=1000.0, mem_peak=int(31.2 * GIB), seconds=125
)


def metrics(status: dict) -> dict[str, str]:
    return {m["name"]: m["value"] for m in status["metrics"]}


def assert_the_api_takes(status: dict) -> None:
    """What the status server decodes (int32 as JSON integers: a float fails its decode) and the CRD allows."""
    decoded = json.loads(json.dumps({"trainerStatus": status}))["trainerStatus"]
    for name in ("progressPercentage", "estimatedRemainingSeconds"):
        if name in decoded:
            assert type(decoded[name]) is int, (name, decoded[name])
    assert trainer_status_schema().errors(decoded) == []


def test_a_running_step_is_posted_as_percentage_remaining_seconds_and_string_metrics_the_crd_takes():
    status = trainer_status(Figures(120, 1000, 0.431215, 2.3456, 51.2, 374.9), GPUS, NOW)
    assert_the_api_takes(status)
    assert status["lastUpdatedTime"] == "2026-01-02T03:04:05Z"
    assert (status["progressPercentage"], status["estimatedRemainingSeconds"]) == (12, 374)
    assert metrics(status) == {
        "current_step": "120",
        "total_steps": "1000",
        "loss": "0.431215",
        "steps_per_second": "2.346",
        "elapsed_seconds": "51",
        "gpu_utilization_percent": "71.0",  # busy GPU-seconds over those sampled, as vdk show reports it
        "gpu_sm_activity_percent": "88.0",
        "gpu_memory_peak_gib": "31.20",
        "gpu_activity_source": "gpm",
    }


def test_the_end_of_the_script_says_how_it_ended_and_only_a_finished_one_is_complete():
    finished = trainer_status(Figures(1000, 1000, 0.2, 2.0, 500.0, None, "finished", 3.0), None, NOW)
    assert_the_api_takes(finished)
    assert (finished["progressPercentage"], finished["estimatedRemainingSeconds"]) == (100, 0)
    assert metrics(finished)["script"] == "finished"
    failed = trainer_status(Figures(420, 1000, 0.2, 2.0, 210.0, None, "failed", 1.0), None, NOW)
    assert_the_api_takes(failed)
    # failed: how far it got, and no remaining time (the server-side apply drops the one posted before)
    assert failed["progressPercentage"] == 42 and "estimatedRemainingSeconds" not in failed
    assert metrics(failed)["script"] == "failed"
    # the last optimizer step is not the end (a final evaluation, a checkpoint): 99 until the script ends
    assert trainer_status(Figures(1000, 1000, eta_s=0.0), None, NOW)["progressPercentage"] == 99


def test_without_a_total_there_is_no_percentage_and_odd_figures_still_fit_the_api():
    unknown = trainer_status(Figures(7, None, float("nan"), 1234.5, 3725.0), None, NOW)
    assert_the_api_takes(unknown)
    assert "progressPercentage" not in unknown and "estimatedRemainingSeconds" not in unknown
    assert metrics(unknown) == {
        "current_step": "7",
        "loss": "nan",
        "steps_per_second": "1234",
        "elapsed_seconds": "3725",
    }
    far = trainer_status(Figures(1, 10**9, 1e-30, 1e-5, 1.0, 1e12), None, NOW)  # months to go: int32 at most
    assert_the_api_takes(far)
    assert far["estimatedRemainingSeconds"] == 2**31 - 1 and far["progressPercentage"] == 0
    assert trainer_status(Figures(1, 10, eta_s=math.inf), None, NOW).get("estimatedRemainingSeconds") is None


def test_a_status_reads_back_as_the_progress_vdk_shows():
    status = trainer_status(Figures(120, 1000, 0.431215, 2.3456, 51.2, 374.9), GPUS, NOW)
    progress = parse_trainer_status(status)
    assert (progress.step, progress.total_steps, progress.loss, progress.eta) == (120, 1000, 0.431215, "6m14s")
    assert (progress.percent, progress.source, progress.updated) == (12, "kubeflow", "2026-01-02T03:04:05Z")
    assert progress.describe() == (
        "step 120/1000, 12%, loss 0.4312, ETA 6m14s, 2.346 steps/s, elapsed 51s, GPU utilisation 71.0%, "
        "from the TrainJob's Kubeflow status of 2026-01-02T03:04:05Z"
    )
    assert progress.brief() == "12% ETA 6m14s"
    assert json.loads(progress.line) == status and json.dumps(progress.to_dict())  # JSON as it is
    done = parse_trainer_status(trainer_status(Figures(1000, 1000, 0.2, 2.0, 500.0, None, "finished"), None, NOW))
    assert (done.percent, done.eta, done.fields["script"]) == (100, None, "finished")


def test_a_status_transformers_or_the_kubeflow_sdk_wrote_reads_too():
    # transformers' KubeflowCallback.on_step_end: its own metric names, numbers as str(value)
    written = {
        "lastUpdatedTime": "2026-01-02T03:04:05.123456+00:00",
        "progressPercentage": 50,
        "estimatedRemainingSeconds": 120,
        "metrics": [
            {"name": "loss", "value": "0.75"},
            {"name": "learning_rate", "value": "5e-05"},
            {"name": "current_step", "value": "50"},
            {"name": "total_steps", "value": "100"},
            {"name": "current_epoch", "value": "0.5"},
        ],
    }
    progress = parse_trainer_status(written)
    assert (progress.step, progress.total_steps, progress.loss, progress.percent, progress.eta) == (
        50,
        100,
        0.75,
        50,
        "2m",
    )
    only_percentage = parse_trainer_status({"lastUpdatedTime": "2026-01-02T03:04:05Z", "progressPercentage": 3})
    assert only_percentage.brief() == "3%" and only_percentage.step is None
    assert parse_trainer_status(None) is None and parse_trainer_status({}) is None
    assert parse_trainer_status({"lastUpdatedTime": "2026-01-02T03:04:05Z"}) is None  # says nothing


def test_the_plugin_writes_the_status_when_the_controller_asks_and_neither_the_user_nor_the_lines_say_no():
    injected = {kubeflow_status.URL: URL, kubeflow_status.CA_CERT: "/ca.crt", kubeflow_status.TOKEN: "/token"}
    settings = StatusSettings.from_env(injected)
    assert settings == StatusSettings(URL, "/ca.crt", "/token", 30.0)  # the progress lines' 30 s
    assert StatusSettings.from_env({}) is None  # no TrainJobStatus gate (or not a TrainJob)
    assert StatusSettings.from_env({**injected, "VDK_ML_TRAINING_KUBEFLOW_STATUS": "0"}) is None
    assert StatusSettings.from_env({**injected, "VDK_ML_TRAINING_PROGRESS_SECONDS": "0"}) is None  # lines off
    # the lines' period, within 15-30 s: the status server is shared by the whole cluster at 5 requests/s
    assert StatusSettings.from_env({**injected, "VDK_ML_TRAINING_PROGRESS_SECONDS": "2"}).period == 15
    assert StatusSettings.from_env({**injected, "VDK_ML_TRAINING_PROGRESS_SECONDS": "600"}).period == 30
    assert StatusSettings.from_env({**injected, "VDK_ML_TRAINING_PROGRESS_SECONDS": "20"}).period == 20


def test_the_writer_turns_transformers_callback_off_in_every_rank(monkeypatch):
    hooked = []
    monkeypatch.setattr(post_import, "when_imported", lambda name, hook: hooked.append((name, hook)))
    env = {kubeflow_status.URL: URL}
    assert kubeflow_status.take_writer(env) is not None
    assert env[kubeflow_status.TRANSFORMERS_SWITCH] == "TRUE"  # what transformers reads (is_kubeflow_available)
    assert hooked == [(kubeflow_status.TRANSFORMERS_MODULE, kubeflow_status._silence_callback)]
    left = {kubeflow_status.URL: URL, "VDK_ML_TRAINING_KUBEFLOW_STATUS": "off"}
    assert kubeflow_status.take_writer(left) is None and kubeflow_status.TRANSFORMERS_SWITCH not in left


def test_a_kubeflow_callback_the_code_names_does_nothing_instead_of_refusing_to_start():
    class TrainerCallback:
        pass

    class KubeflowCallback(TrainerCallback):
        def __init__(self):
            raise RuntimeError("KubeflowCallback requires KUBEFLOW_TRAINER_SERVER_URL")  # with the switch set

    module = types.SimpleNamespace(
        TrainerCallback=TrainerCallback, INTEGRATION_TO_CALLBACK={"kubeflow": KubeflowCallback, "wandb": object}
    )
    kubeflow_status._silence_callback(module)
    silent = module.INTEGRATION_TO_CALLBACK["kubeflow"]
    assert isinstance(silent(), TrainerCallback) and not hasattr(silent, "on_step_end")
    assert module.INTEGRATION_TO_CALLBACK["wandb"] is object
    kubeflow_status._silence_callback(types.SimpleNamespace())  # another transformers: left as it is


# --- the poster, with a stand-in for the network -------------------------------------------------------------


class Network:
    """`send` of a poster: records (poster clock, payload); `fail` answers that many posts with an error;
    `hold` keeps each post waiting until it is set."""

    def __init__(self, clock, fail: int = 0, hold: threading.Event | None = None):
        self.clock, self.fail, self.hold = clock, fail, hold
        self.posts: list[tuple[float, dict]] = []
        self.tried = threading.Event()

    def __call__(self, settings, payload):
        self.tried.set()
        if self.hold is not None:
            self.hold.wait(30)
        self.posts.append((self.clock(), payload["trainerStatus"]))
        if self.fail:
            self.fail -= 1
            raise PostFailed("the server answered 403 (Forbidden)")


class Clock:
    """A clock the test moves; the poster's waits end early when it is moved (the test notifies)."""

    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def settled(network: Network, posts: int) -> None:
    """Wait until the poster has made `posts` posts (its thread runs apart from the test)."""
    for _ in range(3000):
        if len(network.posts) >= posts:
            return
        threading.Event().wait(0.01)
    raise AssertionError(f"{len(network.posts)} posts, expected {posts}")


def quiet(network: Network, posts: int) -> None:
    """The poster made no more than `posts` posts in a moment (its thread had the time to post, and did not)."""
    threading.Event().wait(0.2)
    assert len(network.posts) == posts, network.posts


def move_to(poster: StatusPoster, clock: Clock, now: float) -> None:
    """Set the poster's clock, and wake it as time passing would."""
    clock.now = now
    with poster._cond:
        poster._cond.notify()


def test_the_first_figures_go_at_once_then_the_latest_once_a_period_and_the_last_at_the_end():
    clock = Clock()
    network = Network(clock)
    poster = StatusPoster(StatusSettings(URL, period=20), send=network, clock=clock, wall=lambda: NOW)
    poster.offer(Figures(1, 100))
    settled(network, 1)
    for step in range(2, 20):  # a progress line a second: none posted until the period is over
        move_to(poster, clock, 1000 + step - 1)
        poster.offer(Figures(step, 100))
    quiet(network, 1)
    move_to(poster, clock, 1020)
    settled(network, 2)
    for step in range(20, 40):
        poster.offer(Figures(step, 100))
    move_to(poster, clock, 1039)
    quiet(network, 2)
    move_to(poster, clock, 1040)
    settled(network, 3)
    move_to(poster, clock, 1043)
    poster.offer(Figures(40, 100, script="finished"))
    poster.close()  # the end: at once, whatever the period
    assert [(at, metrics(s)["current_step"]) for at, s in network.posts] == [
        (1000, "1"),
        (1020, "19"),  # the latest figures when its period was over
        (1040, "39"),
        (1043, "40"),
    ]
    assert network.posts[-1][1]["progressPercentage"] == 100
    assert not poster._thread.is_alive()
    poster.offer(Figures(41, 100))  # after the end: nothing more
    assert len(network.posts) == 4


def test_a_failing_server_is_one_line_then_posts_less_often_and_a_line_when_it_works_again():
    clock, err = Clock(), io.StringIO()
    network = Network(clock, fail=3)
    poster = StatusPoster(StatusSettings(URL, period=15), send=network, clock=clock, wall=lambda: NOW, err=err)
    poster.offer(Figures(1, 100))
    settled(network, 1)  # fails
    # 30 s, 60 s, 120 s after each failure; then, working, 15 s
    for posts, (before, due) in enumerate([(1029, 1030), (1089, 1090), (1209, 1210), (1224, 1225)], start=1):
        poster.offer(Figures(posts + 1, 100))
        move_to(poster, clock, before)
        quiet(network, posts)
        move_to(poster, clock, due)
        settled(network, posts + 1)
    assert [at for at, _ in network.posts] == [1000, 1030, 1090, 1210, 1225]
    assert err.getvalue().splitlines() == [
        "[vdk-ml-training] warning: the TrainJob's progress is not reported to Kubeflow (the server answered 403 "
        "(Forbidden)); training goes on, its progress stays in the log; posts go on, less often (every 5 min at most)",
        "[vdk-ml-training] kubeflow: the TrainJob's progress is reported to Kubeflow again (after 3 failed posts)",
    ]
    poster.close()


def test_the_training_thread_never_waits_on_a_post_and_the_end_waits_a_bounded_time():
    hold = threading.Event()
    clock = Clock()
    network = Network(clock, hold=hold)
    poster = StatusPoster(StatusSettings(URL, period=15), send=network, clock=clock, wall=lambda: NOW)
    poster.offer(Figures(1, 100))
    assert network.tried.wait(10)  # the post hangs: a server that does not answer
    offered = threading.Thread(target=lambda: [poster.offer(Figures(s, 100)) for s in range(2, 1000)])
    offered.start()
    offered.join(10)
    assert not offered.is_alive()  # 998 steps' figures handed over while the post hangs
    ended = threading.Thread(target=poster.close, kwargs={"wait": 0.2})
    ended.start()
    ended.join(10)
    assert not ended.is_alive()  # the end waited its bound, not for the post
    hold.set()
    poster._thread.join(10)
    assert [metrics(s)["current_step"] for _, s in network.posts] == ["1", "999"]  # then the last figures went


def test_gpu_figures_that_cannot_be_read_leave_the_progress_and_a_send_that_breaks_never_raises():
    clock, err = Clock(), io.StringIO()
    network = Network(clock)

    def broken():
        raise RuntimeError("NVML gone")

    poster = StatusPoster(StatusSettings(URL, period=15), gpus=broken, send=network, clock=clock, err=err)
    poster.offer(Figures(1, 100))
    settled(network, 1)
    assert "gpu_utilization_percent" not in metrics(network.posts[0][1])

    def crash(settings, payload):
        raise ValueError("a bug")

    failing = StatusPoster(StatusSettings(URL, period=15), send=crash, clock=clock, err=err)
    failing.offer(Figures(1, 100))
    failing.close()
    assert "(ValueError: a bug)" in err.getvalue() and failing.failures == 1


@pytest.mark.parametrize("source", ["gpm", "util"])
def test_the_gpu_metrics_are_node_0_s_measured_figures(source):
    figures = GpuFigures(gpus=2, source=source, sm_now=12.5, busy_gpu_s=50, sampled_gpu_s=200, mem_peak=GIB)
    status = trainer_status(Figures(3), figures, NOW)
    assert_the_api_takes(status)
    assert metrics(status)["gpu_utilization_percent"] == "25.0" and metrics(status)["gpu_activity_source"] == source
    no_activity = GpuFigures(gpus=1, source="none", mem_peak=GIB)  # MIG slices without GPM: memory only
    assert "gpu_utilization_percent" not in metrics(trainer_status(Figures(3), no_activity, NOW))
