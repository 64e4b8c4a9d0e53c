"""A TrainJob's progress in Kubeflow: what rank 0 posts to Kubeflow Trainer's status server, and its reader.

Kubeflow Trainer 2.2+ with the `TrainJobStatus` feature gate injects three variables into every trainer
container: the status endpoint of the TrainJob (`KUBEFLOW_TRAINER_SERVER_URL`), the CA file that signs the
server's certificate and a projected service-account token file (both re-read on every post: the token
rotates). A POST of `{"trainerStatus": {...}}` with `Authorization: Bearer <token>` becomes the TrainJob's
`status.trainerStatus`, which Kubeflow's views, `kubectl get trainjob -o yaml` and `vdk list` / `vdk show`
read without a log request.

The plugin is the one writer of that status. Every rank turns transformers' own Kubeflow callback off
(`DISABLE_KUBEFLOW_INTEGRATION=TRUE`, the switch transformers documents: from 4.57 its `TrainingArguments`
adds the callback whenever the URL is set, even with `report_to="none"`), and a `report_to=["kubeflow"]`
named in the code gets a callback that does nothing instead of one that refuses to start. Why this plugin
and not that callback: it reports every framework (a plain loop, Lightning, Accelerate), its figures are
those of the progress lines (the same steps, loss and ETA as `vdk show`), it adds the GPUs' measured
utilisation, and it posts every 15-30 s where the callback posts every 5 s to a server that the whole
cluster shares at 5 requests per second. `VDK_ML_TRAINING_KUBEFLOW_STATUS=0` (or progress lines off)
leaves the status to transformers' callback.

Rank 0's progress reporter (runtime/progress_lines.py) hands the figures of each progress line to a
`StatusPoster`, which posts the latest from a daemon thread: at once for the first, then at most one post a
period (15-30 s: the progress lines' period, kept in that range), and a final one when the script ends (the
end waits at most FINAL_WAIT_SECONDS for it). The training thread only hands over figures, which never
waits. A post that fails is said in one line; the poster goes on trying, each time later (up to
BACKOFF_MAX_SECONDS apart), and says so in one line when a post succeeds again.

Standard library only: this runs inside the training processes, and the readers (k8s/) import it too.
"""

from __future__ import annotations

import http.client
import json
import math
import os
import ssl
import sys
import threading
import time
import urllib.parse
from collections.abc import Callable
from collections.abc import MutableMapping
from dataclasses import dataclass
from datetime import datetime
from datetime import timezone
from typing import Any
from typing import TextIO

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.gpu_lines import GIB
from vdk.plugin.ml_training.runtime.gpu_lines import GpuFigures
from vdk.plugin.ml_training.runtime.progress_lines import KUBEFLOW
from vdk.plugin.ml_training.runtime.progress_lines import Figures
from vdk.plugin.ml_training.runtime.progress_lines import Progress
from vdk.plugin.ml_training.runtime.progress_lines import ProgressSettings
from vdk.plugin.ml_training.runtime.progress_lines import approximate_duration
from vdk.plugin.ml_training.runtime.progress_lines import as_float
from vdk.plugin.ml_training.runtime.progress_lines import as_int
from vdk.plugin.ml_training.vocabulary import wire

# What Kubeflow Trainer's TrainJobStatus plugin injects (pkg/runtime/framework/plugins/trainjobstatus).
URL = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN = "KUBEFLOW_TRAINER_SERVER_TOKEN"
# transformers' switch for its own callback (integrations/integration_utils.py, is_kubeflow_available).
TRANSFORMERS_SWITCH = "DISABLE_KUBEFLOW_INTEGRATION"
TRANSFORMERS_MODULE = "transformers.integrations.integration_utils"

MIN_PERIOD_SECONDS = 15.0  # the status server's client is limited to 5 requests/s for the whole cluster
MAX_PERIOD_SECONDS = 30.0
TIMEOUT_SECONDS = 5.0  # one post, connection included
FINAL_WAIT_SECONDS = TIMEOUT_SECONDS + 1.0  # how long the script's end waits for the last post
BACKOFF_MAX_SECONDS = 300.0  # after failures, posts are tried at most this far apart
BODY_LIMIT = 1 << 16  # the server refuses larger bodies (413)
VALUE_LIMIT = 64  # characters of a metric's name and value
THREAD_NAME = "vdk-kubeflow-status"

# The metrics posted (the names transformers' callback uses where they say the same: current_step, total_steps,
# loss), and the words `vdk show` uses for the others.
CURRENT_STEP = "current_step"
TOTAL_STEPS = "total_steps"
LOSS = "loss"
STEPS_PER_SECOND = "steps_per_second"
ELAPSED = "elapsed_seconds"
SCRIPT = "script"  # the last post's: finished or failed
GPU_UTILISATION = "gpu_utilization_percent"  # node 0's GPUs: busy GPU-seconds over those sampled, so far
GPU_ACTIVITY = "gpu_sm_activity_percent"  # node 0's GPUs at the last sample
GPU_MEMORY = "gpu_memory_peak_gib"
GPU_SOURCE = "gpu_activity_source"  # gpm or util (runtime/gpu_lines.py)


@dataclass(frozen=True)
class StatusSettings:
    """Where to post: the endpoint, the CA file and the token file the controller injected."""

    url: str
    ca_file: str | None = None
    token_file: str | None = None
    period: float = MAX_PERIOD_SECONDS

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None) -> StatusSettings | None:
        """The settings when this plugin writes the TrainJob's status: the controller injected the endpoint,
        progress lines are on and `VDK_ML_TRAINING_KUBEFLOW_STATUS` is not off; else None."""
        env = dict(os.environ) if env is None else env
        url = (env.get(URL) or "").strip()
        switch = (env.get(protocol.KUBEFLOW_STATUS) or "").strip().lower()
        progress = ProgressSettings(env).period
        if not url or protocol.SWITCH_VALUES.get(switch, True) is False or not progress:
            return None
        period = min(MAX_PERIOD_SECONDS, max(MIN_PERIOD_SECONDS, float(progress)))
        return cls(url, (env.get(CA_CERT) or "").strip() or None, (env.get(TOKEN) or "").strip() or None, period)


# --- the payload, and reading it back ----------------------------------------------------------------------


def timestamp(seconds: float) -> str:
    """RFC 3339 in UTC to the second, as Kubernetes writes times."""
    return datetime.fromtimestamp(seconds, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def trainer_status(figures: Figures, gpus: GpuFigures | None, now: float) -> dict[str, Any]:
    """The `trainerStatus` of progress figures and node 0's GPU figures: integers where the API has int32
    (a float is refused), every metric a string of 1-64 characters."""
    status: dict[str, Any] = {"lastUpdatedTime": timestamp(now)}
    if figures.script == protocol.FINISHED:
        status["progressPercentage"] = 100
        status["estimatedRemainingSeconds"] = 0
    elif figures.total:
        # 100 only once the script finished (as transformers' callback does): the last step is not the end
        status["progressPercentage"] = max(0, min(99, int(figures.step * 100 // figures.total)))
    if figures.eta_s is not None and figures.script is None and math.isfinite(figures.eta_s):
        status["estimatedRemainingSeconds"] = max(0, min(2**31 - 1, int(figures.eta_s)))
    metrics = [(CURRENT_STEP, str(figures.step))]
    if figures.total:
        metrics.append((TOTAL_STEPS, str(figures.total)))
    if figures.loss is not None:
        metrics.append((LOSS, f"{figures.loss:.6g}"))
    if figures.steps_per_s is not None:
        metrics.append((STEPS_PER_SECOND, f"{figures.steps_per_s:.4g}"))
    if figures.elapsed_s is not None:
        metrics.append((ELAPSED, str(int(figures.elapsed_s))))
    if figures.script:
        metrics.append((SCRIPT, figures.script))
    if gpus is not None:
        if gpus.utilisation is not None:
            metrics.append((GPU_UTILISATION, f"{gpus.utilisation * 100:.1f}"))
        if gpus.sm_now is not None:
            metrics.append((GPU_ACTIVITY, f"{gpus.sm_now:.1f}"))
        if gpus.mem_peak:
            metrics.append((GPU_MEMORY, f"{gpus.mem_peak / GIB:.2f}"))
        if gpus.source:
            metrics.append((GPU_SOURCE, gpus.source))
    status["metrics"] = [{"name": n[:VALUE_LIMIT], "value": v[:VALUE_LIMIT]} for n, v in metrics if v]
    return status


def parse_trainer_status(status: Any) -> Progress | None:
    """The progress a TrainJob's `status.trainerStatus` says (whoever wrote it: this plugin, transformers'
    callback, the Kubeflow SDK), as a progress line would say it; None when it says nothing."""
    if not isinstance(status, dict) or not status:
        return None
    metrics = {}
    for entry in status.get("metrics") or []:
        if isinstance(entry, dict) and isinstance(entry.get("name"), str):
            metrics[entry["name"]] = str(entry.get("value", ""))
    step, total = as_int(metrics.get(CURRENT_STEP)), as_int(metrics.get(TOTAL_STEPS))
    percent, remaining = as_int(status.get("progressPercentage")), as_int(status.get("estimatedRemainingSeconds"))
    if step is None and percent is None and remaining is None and not metrics:
        return None
    fields: dict[str, str] = {}
    if metrics.get(STEPS_PER_SECOND):
        fields["steps_per_s"] = metrics[STEPS_PER_SECOND]
    if as_int(metrics.get(ELAPSED)) is not None:
        fields["elapsed"] = approximate_duration(int(metrics[ELAPSED]))
    if metrics.get(SCRIPT):
        fields["script"] = metrics[SCRIPT]
    if metrics.get(GPU_UTILISATION):
        fields["gpu_utilisation"] = metrics[GPU_UTILISATION] + "%"
    finished = metrics.get(SCRIPT) == protocol.FINISHED
    return Progress(
        step=step,
        total_steps=total,
        loss=as_float(metrics.get(LOSS)),
        eta=approximate_duration(remaining) if remaining is not None and not finished else None,
        fields=fields,
        line=json.dumps(status, separators=(",", ":"), sort_keys=True),
        percent=percent,
        source=KUBEFLOW,
        updated=status.get("lastUpdatedTime") if isinstance(status.get("lastUpdatedTime"), str) else None,
    )


# --- posting ------------------------------------------------------------------------------------------------


class PostFailed(Exception):
    """A post the server did not take, or that never reached it: `str()` says why, in a few words."""


def post(settings: StatusSettings, payload: dict, timeout: float = TIMEOUT_SECONDS) -> None:
    """POST `payload` to the status endpoint, the CA and the token read now (the token rotates); raises
    PostFailed unless the server answers 200."""
    body = json.dumps(payload, separators=(",", ":")).encode("utf-8")
    if len(body) > BODY_LIMIT:
        raise PostFailed(f"the status is {len(body)} bytes, over the server's limit of {BODY_LIMIT}")
    headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
    try:
        if settings.token_file:
            with open(settings.token_file, encoding="utf-8") as f:
                headers["Authorization"] = f"Bearer {f.read().strip()}"
        context = ssl.create_default_context(cafile=settings.ca_file)
    except (OSError, ssl.SSLError) as e:
        raise PostFailed(f"cannot read {getattr(e, 'filename', None) or 'the CA file'}: {_reason(e)}") from None
    parts = urllib.parse.urlsplit(settings.url)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    if parts.scheme == "https":
        connection: http.client.HTTPConnection = http.client.HTTPSConnection(
            parts.hostname or "", parts.port, timeout=timeout, context=context
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
    try:
        connection.request("POST", target or "/", body=body, headers=headers)
        response = connection.getresponse()
        answer = response.read(BODY_LIMIT)
    except ssl.SSLCertVerificationError as e:
        why = f"{e.verify_message}; CA {settings.ca_file or 'of the system'}"
        raise PostFailed(f"the server's certificate is not trusted ({why})") from None
    except (OSError, http.client.HTTPException) as e:
        raise PostFailed(f"{parts.hostname}:{parts.port or 443}: {_reason(e)}") from None
    finally:
        connection.close()
    if response.status != 200:
        raise PostFailed(f"the server answered {response.status} {_status_message(answer, response.reason)}")


def _reason(error: BaseException) -> str:
    if isinstance(error, TimeoutError) or "timed out" in str(error):
        return f"no answer within {TIMEOUT_SECONDS:g} s"
    return getattr(error, "strerror", None) or str(error) or type(error).__name__


def _status_message(body: bytes, reason: str) -> str:
    """The message of a metav1.Status answer (`{"status": "Failure", "message": ..., "code": 403}`)."""
    try:
        message = json.loads(body).get("message")
    except (ValueError, AttributeError):
        message = None
    return f"({message})" if message and message != reason else reason


class StatusPoster:
    """Posts the latest progress figures of rank 0 from a daemon thread (a follower of its progress reporter).

    `gpus()` gives node 0's GPU figures at the moment of a post (None: no GPUs sampled); `send`, `clock`, `wall`
    and `err` are there for tests."""

    def __init__(
        self,
        settings: StatusSettings,
        gpus: Callable[[], GpuFigures | None] | None = None,
        send: Callable[[StatusSettings, dict], None] = post,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
        err: TextIO | None = None,
    ):
        self.settings = settings
        self.gpus = gpus
        self._send = send
        self._clock = clock
        self._wall = wall
        self._err = err
        self._cond = threading.Condition()
        self._latest: Figures | None = None
        self._closed = False
        self._due = 0.0  # the first figures are posted at once
        self._thread: threading.Thread | None = None
        self.failures = 0  # failed posts in a row
        self.posted = 0  # posts the server took

    def follow(self, reporter: Any) -> StatusPoster:
        reporter.followers.append(self)
        return self

    def offer(self, figures: Figures) -> None:
        """The training thread's side: keep the figures for the next post. Never waits, never raises."""
        try:
            with self._cond:
                if self._closed:
                    return
                self._latest = figures
                if self._thread is None:
                    self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)
                    self._thread.start()
                self._cond.notify()
        except Exception:  # noqa: BLE001 - no thread: no status, and training goes on
            pass

    def close(self, wait: float = FINAL_WAIT_SECONDS) -> None:
        """The script ended: post the last figures now, waiting for that at most `wait` seconds. Never raises."""
        try:
            with self._cond:
                self._closed = True
                self._cond.notify()
                thread = self._thread
            if thread is not None and thread is not threading.current_thread():
                thread.join(wait)
        except Exception:  # noqa: BLE001 - the script's end goes on without its last post
            pass

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._closed and (self._latest is None or self._clock() < self._due):
                    self._cond.wait(None if self._latest is None else max(0.0, self._due - self._clock()))
                figures, self._latest = self._latest, None
                closed = self._closed
            if figures is not None:
                self._post(figures)
            if closed:
                return

    def _post(self, figures: Figures) -> None:
        try:
            gpus = None
            if self.gpus is not None:
                try:
                    gpus = self.gpus()
                except Exception:  # noqa: BLE001 - the progress without the GPUs' figures
                    gpus = None
            self._send(self.settings, {"trainerStatus": trainer_status(figures, gpus, self._wall())})
        except Exception as e:  # noqa: BLE001 - a post never raises into anything
            self.failures += 1
            if self.failures == 1:
                self._say(
                    wire.warning,
                    "the TrainJob's progress is not reported to Kubeflow "
                    f"({e if isinstance(e, PostFailed) else f'{type(e).__name__}: {e}'}); training goes on, "
                    "its progress stays in the log; posts go on, less often "
                    f"(every {BACKOFF_MAX_SECONDS / 60:g} min at most)",
                )
            backoff = self.settings.period * 2 ** min(self.failures, 5)
            self._due = self._clock() + min(BACKOFF_MAX_SECONDS, backoff)
            return
        if self.failures:
            again = f"the TrainJob's progress is reported to Kubeflow again (after {self.failures} failed posts)"
            self._say(lambda text: wire.line(wire.KUBEFLOW, text), again)
        self.failures = 0
        self.posted += 1
        self._due = self._clock() + self.settings.period

    def _say(self, kind: Callable[[str], str], text: str) -> None:
        try:
            err = self._err or sys.stderr
            err.write(kind(text) + "\n")
            err.flush()
        except Exception:  # noqa: BLE001 - stderr is gone: nothing left to tell
            pass


# --- one writer ---------------------------------------------------------------------------------------------


def take_writer(env: MutableMapping[str, str] | None = None) -> StatusSettings | None:
    """Every rank, before the script runs: when this plugin writes the TrainJob's status (see StatusSettings),
    transformers' Kubeflow callback is turned off in this process and those it starts; the settings, or None."""
    from vdk.plugin.ml_training.runtime import post_import

    environ = os.environ if env is None else env
    settings = StatusSettings.from_env(dict(environ))
    if settings is not None:
        environ[TRANSFORMERS_SWITCH] = "TRUE"
        post_import.when_imported(TRANSFORMERS_MODULE, _silence_callback)
    return settings


def _silence_callback(module: Any) -> None:
    """transformers' `report_to=["kubeflow"]` named in the code: a callback that does nothing, where the
    switch alone makes KubeflowCallback refuse to start (RuntimeError) and the Trainer with it."""
    callbacks = getattr(module, "INTEGRATION_TO_CALLBACK", None)
    base: Any = getattr(module, "TrainerCallback", None)  # a base class of run time: Any to mypy
    if not isinstance(callbacks, dict) or "kubeflow" not in callbacks or base is None:
        return

    class SilentKubeflowCallback(base):
        """vdk-ml-training reports this TrainJob's status to Kubeflow (runtime/kubeflow_status.py)."""

    callbacks["kubeflow"] = SilentKubeflowCallback


def start(reporter: Any, sampler: Any = None) -> StatusPoster | None:
    """Every rank: `take_writer`; rank 0 (the one with a progress reporter) posts its progress, with its
    node's GPU figures when `sampler` (runtime/gpu_sampler.py) samples them."""
    settings = take_writer()
    if settings is None or reporter is None:
        return None
    gpus = sampler.current if sampler is not None else None
    return StatusPoster(settings, gpus).follow(reporter)
