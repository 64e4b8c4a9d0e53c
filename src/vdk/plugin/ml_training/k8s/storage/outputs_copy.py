"""How a run's outputs on its output claim come back to the laptop (where they are: output_location.py): a
short-lived pod of the run's own image mounts the run's directory of the claim read-only and streams it
through its log (runtime/outputs_stream.py); the pod is deleted whatever happens.

Through the log because reading a log is what a user of `vdk show` may do already (`pods/log`); it needs
`create` and `delete` on `pods` besides (the Role of docs/deploy.md), not `pods/exec`."""

from __future__ import annotations

import secrets
import string
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.k8s.api_errors import KubeApiError
from vdk.plugin.ml_training.k8s.resources import POD
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_JOB
from vdk.plugin.ml_training.k8s.runs.identity import LABEL_MANAGED_BY
from vdk.plugin.ml_training.k8s.runs.identity import MANAGED_BY
from vdk.plugin.ml_training.k8s.storage.output_location import OutputLocation
from vdk.plugin.ml_training.runtime.outputs_stream import OutputsReader
from vdk.plugin.ml_training.runtime.outputs_stream import StreamError
from vdk.plugin.ml_training.runtime.outputs_stream import display

if TYPE_CHECKING:
    from vdk.plugin.ml_training.k8s.client import KubeClient

LABEL_OUTPUTS_OF = "vdk.io/outputs-of"  # on the copy pod: the run whose outputs it reads (it is no rank)
CONTAINER = "outputs"
EXPORT_MODULE = "vdk.plugin.ml_training.runtime.outputs_stream"
POD_DEADLINE_SECONDS = 3600  # a copy pod left behind (vdk killed) ends by itself
START_TIMEOUT_SECONDS = 900  # the node may pull the job's image first (gigabytes)
_POLL_SECONDS = 0.5


def copy_pod(
    run_name: str,
    job_name: str,
    image: str,
    python: str,
    location: OutputLocation,
    namespace: str,
    copy: bool,
    only: str | None = None,
) -> dict:
    """The short-lived pod that reads the run's directory of the claim, read-only (`only`: the files of that name,
    or below a directory of that name)."""
    suffix = "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(5))
    selection = ["--only", only] if only else []
    command = [python, "-m", EXPORT_MODULE, *(["--copy"] if copy else []), *selection, layout.OUTPUT_DIR]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{run_name}-outputs-{suffix}",
            "namespace": namespace,
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB: job_name, LABEL_OUTPUTS_OF: run_name},
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": POD_DEADLINE_SECONDS,
            "containers": [
                {
                    "name": CONTAINER,
                    "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": command,
                    "env": [
                        {"name": "PYTHONPATH", "value": layout.PYTHONPATH},
                        {"name": "PYTHONUNBUFFERED", "value": "1"},
                    ],
                    "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}},
                    "volumeMounts": [
                        {
                            "name": "outputs",
                            "mountPath": layout.OUTPUT_DIR,
                            "subPath": location.directory,
                            "readOnly": True,
                        }
                    ],
                }
            ],
            "volumes": [{"name": "outputs", "persistentVolumeClaim": {"claimName": location.claim, "readOnly": True}}],
        },
    }


def read_outputs(
    client: KubeClient,
    pod: dict,
    into: Path | None,
    progress: Callable[[str, int, int], None] | None = None,
    waiting: Callable[[str], None] | None = None,
) -> OutputsReader:
    """Create the copy pod, read its stream (listing, and the files into `into`), delete the pod — also when
    the create's answer was lost, and when the call is interrupted (SIGINT, SIGTERM, SIGHUP: cli/interrupts.py)."""
    name = pod["metadata"]["name"]
    interrupted = False
    try:
        client.create(POD, pod)
        _wait_started(client, name, waiting)
        reader = OutputsReader(into, progress)
        try:
            return reader.feed_all(client.follow_pod_log(name, CONTAINER))
        except StreamError as e:
            raise MLTrainingError(
                f"the copy of the outputs failed: {e}",
                "run the command again; for very large outputs, copy them from a pod that mounts the claim "
                "(`kubectl cp`)",
            ) from None
        except OSError as e:  # the local side: a full disk, a directory that may not be written, a name too long
            where = display(str(e.filename)) if e.filename else str(into)
            raise MLTrainingError(
                f"the copy of the outputs could not be written ({where}: {e.strerror or e})",
                "free space or fix the permissions there, or copy into another directory (--to); the files "
                "completed before are kept, none half-written",
            ) from None
    except KeyboardInterrupt:
        interrupted = True
        raise
    finally:
        _delete(client, name)
        if interrupted:
            client.transport.say(f"Deleted the copy pod {name}; the files copied so far are kept, none half-written")


def _wait_started(client: KubeClient, name: str, waiting: Callable[[str], None] | None) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    said = None
    while True:
        found = client.transport.request(
            "GET", POD.path(client.namespace, name), action=POD.action("get", client.namespace, name)
        )
        status = found.get("status") or {}
        phase = status.get("phase")
        states = [(s.get("state") or {}) for s in status.get("containerStatuses") or []]
        if phase in ("Running", "Succeeded", "Failed") and not any("waiting" in s for s in states):
            if phase == "Failed" and not any("terminated" in s for s in states):
                raise MLTrainingError(
                    f"the copy pod {name} failed: {status.get('message') or status.get('reason')}", ""
                )
            return
        reason = next((s["waiting"].get("reason") for s in states if "waiting" in s), None) or _unscheduled(status)
        if reason in ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "CreateContainerConfigError"):
            message = next((s["waiting"].get("message") for s in states if "waiting" in s), "") or reason
            raise MLTrainingError(f"the copy pod {name} cannot start: {message}", "check the run's image and the claim")
        if waiting is not None and reason and reason != said:
            waiting(reason)
            said = reason
        if time.monotonic() > deadline:
            raise MLTrainingError(
                f"the copy pod {name} did not start within {START_TIMEOUT_SECONDS // 60} minutes ({reason or phase})",
                "a ReadWriteOnce claim can be mounted on one node only: wait until the run's pods are gone, "
                "or check `kubectl describe pod` while it waits",
            )
        time.sleep(_POLL_SECONDS)


def _unscheduled(status: dict) -> str | None:
    for condition in status.get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            return condition.get("message") or condition.get("reason")
    return None


def _delete(client: KubeClient, name: str) -> None:
    try:
        client.transport.request(
            "DELETE",
            POD.path(client.namespace, name),
            body={"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
            action=POD.action("delete", client.namespace, name),
        )
    except KubeApiError as e:
        if e.status != 404:
            raise MLTrainingError(
                f"the copy pod {name} could not be deleted ({e.problem})",
                f"delete it with `kubectl delete pod {name} -n {client.namespace}` (it ends by itself within an hour)",
            ) from None
