"""An MLflow run of each training run, when MLFLOW_TRACKING_URI names a tracking server (the user's environment
for local runs, the cluster's setting for its pods): its parameters (the config, a sweep trial's values), the
run's series as metrics (runtime/series.py: the same names as TensorBoard's, without `vdk/`), tags (job, team,
image, commit, datasets, the run's name in vdk) and its end; a sweep is a parent run with its trials as
children (`parent_run`, made by the sweep; each trial is told its id).

A script that logs to MLflow itself is not doubled: when it creates a run of its own (`mlflow.start_run`, an
`MlflowClient.create_run`: transformers' and Lightning's loggers too), this one stands down, and the run it had
made (if any) is deleted.

Through MLflow's REST API (`/api/2.0/mlflow/...`, the one its own client speaks), with the standard library: the
MLflow client (mlflow-skinny: 47 packages, 70 MB, pydantic 2 and FastAPI among them) is not installed into
every image for this, nor into vdk's environment. The posts happen on the series' thread, at most one batch every
POST_SECONDS; a failed post is said in one line and tried again later (its points kept, up to MAX_KEPT).
Standard library only.
"""

from __future__ import annotations

import base64
import json
import os
import ssl
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from typing import Any

from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.series import Point
from vdk.plugin.ml_training.runtime.series import RunFacts
from vdk.plugin.ml_training.vocabulary import wire

# MLflow's own variables (mlflow/environment_variables.py)
PREFIX = "MLFLOW_"
TRACKING_URI = "MLFLOW_TRACKING_URI"
EXPERIMENT_NAME = "MLFLOW_EXPERIMENT_NAME"
EXPERIMENT_ID = "MLFLOW_EXPERIMENT_ID"
TOKEN = "MLFLOW_TRACKING_TOKEN"
USERNAME = "MLFLOW_TRACKING_USERNAME"
PASSWORD = "MLFLOW_TRACKING_PASSWORD"
INSECURE_TLS = "MLFLOW_TRACKING_INSECURE_TLS"
SERVER_CERT = "MLFLOW_TRACKING_SERVER_CERT_PATH"
# MLflow's system tags (mlflow/utils/mlflow_tags.py)
RUN_NAME_TAG = "mlflow.runName"
PARENT_TAG = "mlflow.parentRunId"
COMMIT_TAG = "mlflow.source.git.commit"
SOURCE_TAG = "mlflow.source.name"

API = "/api/2.0/mlflow/"
TIMEOUT_SECONDS = 15.0  # a server just started takes seconds to answer its first requests
POST_SECONDS = 10.0  # at most one batch of metrics this often (and the last one at the end)
MAX_BATCH = 1000  # MLflow's limit of metrics in one log-batch
MAX_PARAMS = 100  # ... of params
MAX_KEPT = 100_000  # points kept while the server does not answer
PARAM_LIMIT = 500  # characters of a param's value every MLflow server takes
TAG_PREFIX = "vdk."
FINISHED, FAILED = "FINISHED", "FAILED"


class MlflowError(Exception):
    """A request the tracking server did not take: `str()` says why, in a few words."""


class MlflowRest:
    """The few calls of MLflow's REST API that a run needs."""

    def __init__(self, uri: str, env: Mapping[str, str] | None = None, timeout: float = TIMEOUT_SECONDS):
        env = os.environ if env is None else env
        self.uri = uri.rstrip("/")
        self.timeout = timeout
        self._headers = {"Content-Type": "application/json"}
        if env.get(TOKEN):
            self._headers["Authorization"] = f"Bearer {env[TOKEN]}"
        elif env.get(USERNAME):
            pair = f"{env[USERNAME]}:{env.get(PASSWORD, '')}".encode()
            self._headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        self._context = None
        if self.uri.startswith("https:"):
            insecure = protocol.SWITCH_VALUES.get((env.get(INSECURE_TLS) or "").strip().lower(), False)
            self._context = ssl.create_default_context(cafile=env.get(SERVER_CERT) or None)
            if insecure:
                self._context.check_hostname = False
                self._context.verify_mode = ssl.CERT_NONE

    def call(self, endpoint: str, body: dict | None = None, query: dict | None = None) -> dict:
        url = self.uri + API + endpoint + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(url, data=data, headers=self._headers, method="POST" if data else "GET")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout, context=self._context) as response:
                return json.loads(response.read() or b"{}")
        except urllib.error.HTTPError as e:
            raise MlflowError(f"{self.uri} answered {e.code} {_message(e)}") from None
        except (OSError, ValueError) as e:
            reason = getattr(e, "reason", None) or e
            raise MlflowError(f"{self.uri}: {reason}") from None

    def experiment_id(self, name: str) -> str:
        """The experiment of that name, made if missing."""
        try:
            return str(
                self.call("experiments/get-by-name", query={"experiment_name": name})["experiment"]["experiment_id"]
            )
        except MlflowError as e:
            if "RESOURCE_DOES_NOT_EXIST" not in str(e) and " 404 " not in str(e):
                raise
        try:
            return str(self.call("experiments/create", {"name": name})["experiment_id"])
        except MlflowError as e:  # made meanwhile by another run
            if "RESOURCE_ALREADY_EXISTS" not in str(e):
                raise
            return str(
                self.call("experiments/get-by-name", query={"experiment_name": name})["experiment"]["experiment_id"]
            )

    def create_run(self, experiment: str, name: str, tags: dict[str, str], start_ms: int) -> str:
        body = {"experiment_id": experiment, "start_time": start_ms, "tags": _entries(tags)}
        if name:
            body["run_name"] = name
        return str(self.call("runs/create", body)["run"]["info"]["run_id"])

    def log_batch(
        self, mlflow_run_id: str, metrics: list[dict] | None = None, params: dict[str, str] | None = None
    ) -> None:
        metrics = metrics or []
        params_list = _entries(params or {})
        for at in range(0, max(len(params_list), 1), MAX_PARAMS):
            chunk = params_list[at : at + MAX_PARAMS]
            if chunk:
                self.call("runs/log-batch", {"run_id": mlflow_run_id, "params": chunk})
        for at in range(0, len(metrics), MAX_BATCH):
            self.call("runs/log-batch", {"run_id": mlflow_run_id, "metrics": list(metrics[at : at + MAX_BATCH])})

    def end_run(self, mlflow_run_id: str, status: str, end_ms: int) -> None:
        self.call("runs/update", {"run_id": mlflow_run_id, "status": status, "end_time": end_ms})

    def delete_run(self, mlflow_run_id: str) -> None:
        self.call("runs/delete", {"run_id": mlflow_run_id})


def _message(error: Any) -> str:
    try:
        body = json.loads(error.read() or b"{}")
        return f"({body.get('error_code', '')}: {body.get('message', '')})"
    except (ValueError, OSError, AttributeError):
        return str(getattr(error, "reason", ""))


def _entries(values: Mapping[str, Any]) -> list[dict]:
    return [{"key": k[:250], "value": str(v)[:PARAM_LIMIT]} for k, v in values.items()]


def _ms(seconds: float) -> int:
    return int(seconds * 1000)


def run_tags(facts: RunFacts, parent: str = "") -> dict[str, str]:
    """The tags of a run of these facts (MLflow's own where it has one)."""
    tags = {SOURCE_TAG: wire.PROJECT}
    if facts.run:
        tags[RUN_NAME_TAG] = facts.run
        tags[TAG_PREFIX + "run"] = facts.run
    for key in ("job", "team", "image"):
        if getattr(facts, key):
            tags[TAG_PREFIX + key] = getattr(facts, key)
    if facts.commit:
        tags[COMMIT_TAG] = facts.commit
        tags[TAG_PREFIX + "commit"] = facts.commit + (" (with uncommitted changes)" if facts.dirty else "")
    for target, version in sorted(facts.datasets.items()):
        tags[f"{TAG_PREFIX}dataset.{target}"] = version
    if parent:
        tags[PARENT_TAG] = parent
    return tags


def run_params(facts: RunFacts) -> dict[str, str]:
    """The params of a run: its config, and a sweep trial's values (which win)."""
    out = {k: str(v) for k, v in sorted(facts.config.items())}
    out.update({k: str(v) for k, v in sorted(facts.params.items())})
    return out


class MlflowWriter:
    """The MLflow run of one training run (a series writer: runtime/series.py)."""

    name = "MLflow logging"

    def __init__(
        self, rest: MlflowRest, facts: RunFacts, experiment: str, err: Any = None, clock=time.monotonic, wall=time.time
    ):
        self.rest = rest
        self.facts = facts
        self.experiment = experiment  # an id ("id:3") or a name
        self.mlflow_run_id: str | None = None
        self._err = err
        self._clock = clock
        self._wall = wall
        self._kept: list[dict] = []
        self._due = 0.0
        self._failures = 0
        self.stood_down = threading.Event()  # the script logs to MLflow itself
        follow_the_script(self)

    def write(self, points: list[Point]) -> None:
        if self._standing_down():
            return
        self._kept += [
            {"key": p.series, "value": p.value, "timestamp": _ms(p.wall), "step": int(p.step)} for p in points
        ]
        del self._kept[:-MAX_KEPT]
        if self._clock() >= self._due:
            self._post()

    def _post(self) -> None:
        try:
            if self.mlflow_run_id is None:
                self._create()
            kept, self._kept = self._kept, []
            try:
                self.rest.log_batch(self.mlflow_run_id or "", kept)
            except MlflowError:
                self._kept = kept + self._kept
                raise
        except MlflowError as e:
            self._failures += 1
            if self._failures == 1:
                self._say(f"the run is not logged to MLflow ({e}); training goes on, posts are tried again")
            self._due = self._clock() + min(300.0, POST_SECONDS * 2 ** min(self._failures, 5))
            return
        if self._failures:
            self._say(f"the run is logged to MLflow again (after {self._failures} failed posts)", warn=False)
        self._failures = 0
        self._due = self._clock() + POST_SECONDS

    def _create(self) -> None:
        experiment = self.experiment
        experiment_id = experiment[3:] if experiment.startswith("id:") else self.rest.experiment_id(experiment)
        tags = run_tags(self.facts, self.facts.parent)
        self.mlflow_run_id = self.rest.create_run(experiment_id, self.facts.run, tags, _ms(self._wall()))
        self.rest.log_batch(self.mlflow_run_id, params=run_params(self.facts))
        self._say(
            f"logged to MLflow as run {self.mlflow_run_id} of experiment {experiment_id} ({self.rest.uri})", warn=False
        )

    def _standing_down(self) -> bool:
        if not self.stood_down.is_set():
            return False
        if self.mlflow_run_id is not None:
            run, self.mlflow_run_id = self.mlflow_run_id, None
            try:
                self.rest.delete_run(run)
            except MlflowError:
                pass
        return True

    def close(self, status: str) -> None:
        if self._standing_down():
            self._say("the script logs to MLflow itself: vdk made no MLflow run of its own", warn=False)
            return
        if not self._kept and self.mlflow_run_id is None:
            return
        self._due = 0.0
        self._post()
        if self.mlflow_run_id is not None and not self._kept:
            try:
                self.rest.end_run(
                    self.mlflow_run_id, FINISHED if status == protocol.FINISHED else FAILED, _ms(self._wall())
                )
            except MlflowError as e:
                self._say(f"MLflow run {self.mlflow_run_id} was not marked as ended ({e})")

    def _say(self, text: str, warn: bool = True) -> None:
        try:
            err = self._err or sys.stderr
            err.write((wire.warning(text) if warn else wire.line(wire.MLFLOW, text)) + "\n")
            err.flush()
        except Exception:  # noqa: BLE001 - stderr is gone: nothing left to tell
            pass


def follow_the_script(writer: MlflowWriter) -> None:
    """When the script makes an MLflow run of its own, `writer` stands down."""
    from vdk.plugin.ml_training.runtime import post_import

    def wrap(owner: Any, name: str) -> None:
        original = getattr(owner, name, None)
        if original is None or getattr(original, "_vdk_mlflow", False):
            return

        def made_by_the_script(*args: Any, **kwargs: Any) -> Any:
            writer.stood_down.set()
            return original(*args, **kwargs)

        # marks on a function object, as functools.wraps leaves them (mypy knows no attributes of a function)
        made_by_the_script._vdk_mlflow = True  # type: ignore[attr-defined]
        made_by_the_script.__wrapped__ = original  # type: ignore[attr-defined]
        setattr(owner, name, made_by_the_script)

    post_import.when_imported("mlflow.tracking.client", lambda m: wrap(getattr(m, "MlflowClient", None), "create_run"))
    post_import.when_imported("mlflow.tracking.fluent", lambda m: wrap(m, "start_run"))


def tracking_uri(env: Mapping[str, str] | None = None, err: Any = None) -> str | None:
    """The tracking server's address, when MLFLOW_TRACKING_URI names one this can log to (http or https)."""
    env = os.environ if env is None else env
    uri = (env.get(TRACKING_URI) or "").strip()
    if not uri:
        return None
    if urllib.parse.urlsplit(uri).scheme not in ("http", "https"):
        (err or sys.stderr).write(
            wire.warning(
                f"{TRACKING_URI}={uri} is not a tracking server (http or https): vdk logs runs to a server only; "
                "the run is not logged to MLflow"
            )
            + "\n"
        )
        return None
    return uri


def experiment_of(facts: RunFacts, env: Mapping[str, str]) -> str:
    """MLFLOW_EXPERIMENT_ID ("id:N"), else MLFLOW_EXPERIMENT_NAME, else the job's name, else MLflow's default."""
    if (env.get(EXPERIMENT_ID) or "").strip():
        return "id:" + env[EXPERIMENT_ID].strip()
    return (env.get(EXPERIMENT_NAME) or "").strip() or facts.job or "Default"


def start(facts: RunFacts, env: Mapping[str, str] | None = None, err: Any = None) -> MlflowWriter | None:
    env = os.environ if env is None else env
    uri = tracking_uri(env, err)
    if uri is None:
        return None
    return MlflowWriter(MlflowRest(uri, env), facts, experiment_of(facts, env), err)


def parent_run(
    facts: RunFacts, params: dict[str, str], env: Mapping[str, str] | None = None, rest_of: Any = MlflowRest
) -> tuple[MlflowRest, str] | None:
    """A sweep's parent run (made by the sweep, before its trials), or None without a tracking server;
    MlflowError when the server does not take it. `rest_of(uri, env)`: the client (tests)."""
    env = os.environ if env is None else env
    uri = tracking_uri(env)
    if uri is None:
        return None
    rest = rest_of(uri, env)
    experiment = experiment_of(facts, env)
    experiment_id = experiment[3:] if experiment.startswith("id:") else rest.experiment_id(experiment)
    mlflow_run_id = rest.create_run(experiment_id, facts.run, run_tags(facts), _ms(time.time()))
    rest.log_batch(mlflow_run_id, params={**run_params(facts), **params})
    return rest, mlflow_run_id


# --- a cluster sweep's parent run: made by its study's pod, its id kept in the study for the trial pods ---------------

PARENT_ATTR = "vdk_mlflow_parent"  # the study's user attribute that holds the sweep's MLflow run


class SweepParent:
    """The MLflow run of a sweep whose study is `study` (Optuna), made once (a restarted study pod finds it in the
    study's user attributes) and ended with the sweep's best value."""

    def __init__(self, rest: MlflowRest, mlflow_run_id: str):
        self.rest = rest
        self.mlflow_run_id = mlflow_run_id

    @classmethod
    def of(
        cls, study: Any, sweep: Any, env: Mapping[str, str] | None = None, err: Any = None, rest_of: Any = MlflowRest
    ) -> SweepParent | None:
        from vdk.plugin.ml_training.runtime.series import read_facts

        env = os.environ if env is None else env
        uri = tracking_uri(env, err)
        if uri is None:
            return None
        known = study.user_attrs.get(PARENT_ATTR)
        if known:
            return cls(rest_of(uri, env), str(known))
        params = {"sweep.metric": sweep.metric, "sweep.goal": sweep.goal, "sweep.algorithm": sweep.algorithm,
                  "sweep.trials": str(sweep.trials)}  # fmt: skip
        try:
            made = parent_run(read_facts(env), params, env, rest_of)
        except MlflowError as e:
            (err or sys.stderr).write(wire.warning(f"the sweep is not logged to MLflow ({e})") + "\n")
            return None
        if made is None:
            return None
        study.set_user_attr(PARENT_ATTR, made[1])
        return cls(*made)

    def end(self, snapshot: dict, metric: str, stopped: bool, err: Any = None) -> None:
        """The sweep ended: its best value (and trial), its status."""
        best = next((t for t in snapshot.get("trials", []) if t["number"] == snapshot.get("best")), None)
        now = _ms(time.time())
        try:
            if best is not None and best.get("metric") is not None:
                point = {"key": f"best_{metric}", "value": best["metric"], "timestamp": now, "step": 0}
                self.rest.log_batch(self.mlflow_run_id, [point], {"best_trial": str(best["number"])})
            self.rest.end_run(self.mlflow_run_id, FAILED if stopped else FINISHED, now)
        except MlflowError as e:
            (err or sys.stderr).write(
                wire.warning(f"the sweep's MLflow run {self.mlflow_run_id} was not ended ({e})") + "\n"
            )
