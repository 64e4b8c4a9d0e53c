"""What a sweep on the cluster says of itself: the study (the last study line of its study pod's log, which holds
every trial: runtime/sweep_protocol.py) and which pod ran a trial (its slot: the completion index of the trials'
Indexed Job), read with the requests `vdk show` makes already (pods, a log)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from vdk.plugin.ml_training.k8s.backends.base import completion_index_rank
from vdk.plugin.ml_training.k8s.runs.summary import RunSummary
from vdk.plugin.ml_training.k8s.sweep_manifests import STUDY_CONTAINER
from vdk.plugin.ml_training.k8s.sweep_manifests import TRIAL_CONTAINER
from vdk.plugin.ml_training.k8s.sweep_manifests import study_selector
from vdk.plugin.ml_training.runtime.sweep_protocol import read_study_lines

if TYPE_CHECKING:
    from vdk.plugin.ml_training.k8s.client import KubeClient

# The study prints a line per change, each holding every trial (a few megabytes for 10,000 trials): its last one is
# among the last few lines of its log, read first; among the last 40 when something else printed after it.
STUDY_TAIL_LINES = (4, 40)


def study_snapshot(client: KubeClient, run: RunSummary) -> tuple[dict | None, str | None]:
    """(the study's last snapshot, None) or (None, why there is none yet: its pod pending, gone, ...)."""
    pods = sorted(client.list_pods(study_selector(run.name)), key=_created, reverse=True)
    if not pods:
        return None, "its study pod is not there (not created yet, or removed with the finished sweep)"
    why = None
    for pod in pods:
        name = pod["metadata"]["name"]
        for previous in (False, True):
            for lines in STUDY_TAIL_LINES:
                text, why = client.pod_log(name, STUDY_CONTAINER, previous=previous, tail_lines=lines)
                snapshot = read_study_lines((text or "").splitlines())
                if snapshot is not None:
                    return snapshot, None
                if text is None or text.count("\n") < lines:  # no log, or the whole of it was read
                    break
    return None, f"its study has not reported yet ({why or 'its pod is starting'})"


def trial_pod(client: KubeClient, run: RunSummary, slot: int) -> dict | None:
    """The latest pod of the slot that ran a trial (a replaced pod's successor)."""
    pods = [
        p for p in client.list_pods(f"batch.kubernetes.io/job-name={run.name}") if completion_index_rank(p)[0] == slot
    ]
    return max(pods, key=_created) if pods else None


def trial_log(client: KubeClient, pod: dict) -> tuple[str | None, str | None]:
    """(the log of a trial's pod, None) or (None, why there is none)."""
    name = pod["metadata"]["name"]
    text, why = client.pod_log(name, TRIAL_CONTAINER)
    if text is None:
        phase = (pod.get("status") or {}).get("phase") or "unknown"
        return None, f"{name} has no log ({why or phase})"
    return text, None


def _created(pod: dict) -> str:
    metadata = pod.get("metadata") or {}
    return f"{metadata.get('creationTimestamp') or ''}{metadata.get('name') or ''}"
