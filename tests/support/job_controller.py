"""Kubernetes' Job controller and kubelet for the Jobs a test created in the fake API server, running each pod's
command as a local process of this interpreter (the plugin's runtime is installed in it, as the image has it):
what a sweep needs, its trials' Indexed Job and its study's Job, and a plain Job's run, end to end without a cluster.

Per Job, as the controller does (pkg/controller/job): pods `<job>-<index>` with the completion index as label,
annotation and JOB_COMPLETION_INDEX (Indexed), at most `parallelism` at a time until `completions` succeeded;
a pod that fails is replaced (`backoffLimit` counts it) unless a podFailurePolicy rule matches it (in order, the
first that matches: FailJob on its exit code fails the Job and stops its other pods, Ignore on its DisruptionTarget
condition replaces it without counting it: pod_failure_policy.go); the Job's status (active, succeeded, failed,
its Complete / Failed condition) as the API shows it. `disrupt` stops a pod as the cluster does: the scheduler
preempting it, the Eviction API, the kubelet under node pressure (k8s.io/api/core/v1 DisruptionTarget reasons):
the condition, the event, SIGTERM; a pod being deleted (preemption, eviction) is gone from the API once the
controller counted it (its finalizer removed), a pod the kubelet evicted stays Failed with reason Evicted. A Job
deleted through the API (`vdk execute --cancel`, or its owner's deletion) stops its processes, as the kubelet stops
the pods of a deleted Job. Per pod, as the kubelet does: the container's environment (`$(VAR)` and field
references; an Indexed Job's rendezvous at rank 0's pod DNS name is this machine's loopback), the image's
interpreter (`python`) as this one, the image's paths (the job directory, the output claim's subPath) as host
directories, its output as its log line by line, its phase and exit code.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from tests.support import cluster_state
from tests.support.controllers import Pod
from tests.support.fake_apiserver import FakeKube
from tests.support.local_cluster import expand
from tests.support.local_cluster import resolve_env
from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.runtime import sweep_trial

COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"
_POLL = 0.2


DISRUPTION_TARGET = "DisruptionTarget"
# What each DisruptionTarget reason's component does (kube-scheduler, the Eviction API, the kubelet): its
# condition message, the event it records on the pod (reason, message), and whether the pod is deleted.
DISRUPTIONS = {
    "PreemptionByScheduler": (
        "default-scheduler: preempting to accommodate a higher priority pod",
        ("Preempted", "Preempted by pod 3f0c2d8e-5f7a-4a4e-9c1e-0d1f2e3a4b5c on node localhost"),
        True,
    ),
    "EvictionByEvictionAPI": ("Eviction API: evicting", None, True),
    "TerminationByKubelet": (
        "The node was low on resource: memory.",
        ("Evicted", "The node was low on resource: memory."),
        False,
    ),
}


@dataclass
class PodProcess:
    name: str
    index: int
    process: subprocess.Popen
    thread: threading.Thread
    exit_code: int | None = None
    disruption: str | None = None  # the DisruptionTarget reason it was stopped with


@dataclass
class JobRun:
    name: str
    namespace: str
    uid: str
    pods: list[PodProcess] = field(default_factory=list)
    succeeded: int = 0
    failed: int = 0
    outcome: str | None = None  # "Complete" / "Failed"


class LocalJobController:
    """Runs the Jobs of `namespace` in the fake API server as local processes: the job directory is `job_dir`,
    claim `name` is `claims[name]`."""

    def __init__(self, fake: FakeKube, job_dir: Path, claims: dict[str, Path], namespace: str = "ml"):
        self.fake = fake
        self.job_dir = job_dir
        self.claims = claims
        self.namespace = namespace
        self.jobs: dict[str, JobRun] = {}
        self.ports: dict[tuple[str, int], int] = {}  # (Service, port) -> the port of this machine
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def start(self) -> LocalJobController:
        """Start it once the objects are created (as one `vdk deploy` creates them at once): a pod's Service
        addresses are rewritten when it starts, so a Service created after a pod that uses or serves it would
        be unknown to that pod (in a cluster, its DNS name resolves once it exists)."""
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(30)
        for run in self.jobs.values():
            for pod in run.pods:
                _kill(pod.process)

    def running_processes(self) -> list[PodProcess]:
        return [p for run in self.jobs.values() for p in run.pods if p.process.poll() is None]

    def wait(self, name: str, timeout: float) -> JobRun:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            run = self.jobs.get(name)
            if run is not None and run.outcome is not None:
                return run
            time.sleep(_POLL)
        tails = {pod: text[-1500:] for (_, pod, _, _), text in self.fake.logs.items()}
        raise AssertionError(f"Job {name} did not end within {timeout} s: {self.jobs.get(name)}; the logs: {tails}")

    # --- the controller ---------------------------------------------------------------------------

    def _loop(self) -> None:
        while not self._stop.is_set():
            with self.fake._lock:
                jobs = {
                    key[3]: obj
                    for key, obj in self.fake.objects.items()
                    if key[:3] == ("batch/v1", "jobs", self.namespace)
                }
            for name, obj in jobs.items():
                run = self.jobs.get(name)
                if run is None or run.uid != obj["metadata"]["uid"]:
                    run = self.jobs[name] = JobRun(name, self.namespace, obj["metadata"]["uid"])
                self._step(run, obj)
            for name, run in self.jobs.items():
                if name not in jobs and run.outcome is None:  # deleted: its pods stop
                    for pod in run.pods:
                        _kill(pod.process)
                    run.outcome = "Deleted"
            time.sleep(_POLL)

    def _step(self, run: JobRun, job: dict) -> None:
        if run.outcome is not None:
            return
        spec = job["spec"]
        completions = int(spec.get("completions", 1))
        parallelism = int(spec.get("parallelism", 1))
        indexed = spec.get("completionMode") == "Indexed"
        for pod in run.pods:
            if pod.exit_code is None and pod.process.poll() is not None:
                pod.thread.join(10)
                pod.exit_code = pod.process.returncode
                self._pod_status(pod, "Succeeded" if pod.exit_code == 0 else "Failed")
                if pod.exit_code == 0:
                    run.succeeded += 1
                    continue
                action = _policy_action(spec, pod.exit_code, pod.disruption is not None)
                if pod.disruption is not None and DISRUPTIONS[pod.disruption][2]:
                    with self.fake._lock:  # being deleted: gone once counted (its finalizer removed)
                        self.fake.objects.pop(("v1", "pods", self.namespace, pod.name), None)
                if action == "Ignore":
                    continue  # not counted: its index gets a new pod
                run.failed += 1
                if action == "FailJob":
                    return self._end(run, job, "Failed", f"pod {pod.name} exited with {pod.exit_code}")
        if run.failed > int(spec.get("backoffLimit", 6)):
            return self._end(run, job, "Failed", "BackoffLimitExceeded")
        if run.succeeded >= completions:
            return self._end(run, job, "Complete", None)
        active = [p for p in run.pods if p.exit_code is None]
        subdomain = (spec["template"].get("spec") or {}).get("subdomain")
        if not active and subdomain and not self._has_service(subdomain):
            return  # its pods resolve each other under the Service: they start once it exists (see start())
        done = {p.index for p in run.pods if p.exit_code == 0}
        busy = {p.index for p in active}
        for index in range(completions):
            if len(active) >= parallelism:
                break
            if index in done or index in busy:
                continue
            active.append(self._start_pod(run, job, index if indexed else 0, indexed))
            busy.add(index)
        self._job_status(job, run, len(active))

    def disrupt(self, pod: PodProcess, reason: str = "PreemptionByScheduler") -> None:
        """Stop `pod` as the cluster's component for `reason` does: the DisruptionTarget condition (and, for the
        scheduler and the kubelet, their event) on the pod, then SIGTERM to its processes (a pod being deleted,
        or the kubelet's eviction, gives its grace period: the training saves and ends)."""
        message, event, deleted = DISRUPTIONS[reason]
        condition = {"type": DISRUPTION_TARGET, "status": "True", "reason": reason, "message": message}
        with self.fake._lock:
            stored = self.fake.objects.get(("v1", "pods", self.namespace, pod.name))
            if stored is not None:
                stored["status"].setdefault("conditions", []).append({**condition, "lastTransitionTime": _now()})
                if deleted:
                    stored["metadata"]["deletionTimestamp"] = _now()
        if event is not None:
            self.fake.add("events", cluster_state.event("Pod", pod.name, *event, last=_now()), self.namespace)
        pod.disruption = reason
        os.killpg(pod.process.pid, signal.SIGTERM)

    def _end(self, run: JobRun, job: dict, outcome: str, message: str | None) -> None:
        for pod in run.pods:
            if pod.process.poll() is None:
                _kill(pod.process)
        run.outcome = outcome
        condition = {"type": outcome, "status": "True", "message": message or "", "lastTransitionTime": _now()}
        status = {"succeeded": run.succeeded, "failed": run.failed, "active": 0, "conditions": [condition]}
        if outcome == "Complete":
            status["completionTime"] = _now()
        self._set_job_status(job, status)

    def _job_status(self, job: dict, run: JobRun, active: int) -> None:
        self._set_job_status(
            job,
            {
                "active": active,
                "ready": active,
                "succeeded": run.succeeded,
                "failed": run.failed,
                "startTime": job.get("status", {}).get("startTime") or _now(),
            },
        )

    def _set_job_status(self, job: dict, status: dict) -> None:
        with self.fake._lock:
            stored = self.fake.objects.get(("batch/v1", "jobs", self.namespace, job["metadata"]["name"]))
            if stored is not None:
                stored["status"] = status
                job["status"] = status

    # --- the kubelet ------------------------------------------------------------------------------

    def _start_pod(self, run: JobRun, job: dict, index: int, indexed: bool) -> PodProcess:
        template = job["spec"]["template"]
        attempt = sum(1 for p in run.pods if p.index == index)
        name = f"{run.name}-{index}" + (f"-{attempt}" if attempt else "")
        labels = {**(template.get("metadata") or {}).get("labels", {}), "batch.kubernetes.io/job-name": run.name}
        annotations = {}
        if indexed:
            labels[COMPLETION_INDEX] = annotations[COMPLETION_INDEX] = str(index)
        container = template["spec"]["containers"][0]
        pod = {
            "metadata": {
                "name": name,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": run.name, "uid": run.uid}],
            },
            "spec": {**template["spec"], "nodeName": "localhost"},
            "status": {
                "phase": "Running",
                "containerStatuses": [
                    {"name": container["name"], "ready": True, "restartCount": 0, "state": {"running": {}}}
                ],
            },
        }
        self.fake.add("pods", pod, self.namespace)
        as_pod = Pod(name, name, container, template["spec"].get("volumes") or [], "Never", labels, annotations)
        argv, env, cwd = self._command(template["spec"], container, as_pod, index, indexed)
        process = subprocess.Popen(
            argv,
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        thread = threading.Thread(target=self._relay, args=(process, name, container["name"]), daemon=True)
        thread.start()
        entry = PodProcess(name, index, process, thread)
        run.pods.append(entry)
        return entry

    def _command(self, pod_spec: dict, container: dict, pod: Pod, index: int, indexed: bool):
        paths = {layout.JOB_DIR: str(self.job_dir)}
        volumes = {v["name"]: v for v in pod_spec.get("volumes") or []}
        for mount in container.get("volumeMounts") or []:
            claim = (volumes[mount["name"]].get("persistentVolumeClaim") or {}).get("claimName")
            if claim:
                host = self.claims[claim] / mount.get("subPath", "")
                host.mkdir(parents=True, exist_ok=True)
                paths[mount["mountPath"]] = str(host)
        resolved = resolve_env(container.get("env") or [], pod)
        if indexed:
            resolved["JOB_COMPLETION_INDEX"] = str(index)
        addresses, listens = self._services(pod.labels)
        env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_") and k != "PYTHONPATH"}
        env.update({k: _rewrite(_rewrite(v, paths), addresses) for k, v in resolved.items() if k != "PYTHONPATH"})
        # An Indexed Job's rendezvous: rank 0's pod DNS name under its headless Service (`<job>-0.<service>`)
        host, port = env.get("PET_MASTER_ADDR", ""), env.get("PET_MASTER_PORT", "")
        for (service, number), local in self.ports.items():
            if host.endswith(f".{service}") and port == str(number):
                env["PET_MASTER_ADDR"], env["PET_MASTER_PORT"] = "127.0.0.1", str(local)
        python = (container.get("command") or ["python"])[0]
        argv = [
            sys.executable if a == python else listens.get(a) or _rewrite(expand(a, resolved), paths)
            for a in [*(container.get("command") or []), *(container.get("args") or [])]
        ]
        cwd = _rewrite(container.get("workingDir") or layout.JOB_DIR, paths)
        return argv, env, cwd

    def _has_service(self, name: str) -> bool:
        with self.fake._lock:
            return ("v1", "services", self.namespace, name) in self.fake.objects

    def _services(self, labels: dict[str, str]) -> tuple[dict[str, str], dict[str, str]]:
        """The one change, as local_cluster.py makes for the rendezvous: a Service's `name:port` is
        127.0.0.1 and a free port of this machine (so that tests do not collide), and a pod it selects listens
        on that port (an argument equal to the port number is that port)."""
        from vdk.plugin.ml_training.local.launcher import free_port

        with self.fake._lock:
            services = [o for k, o in self.fake.objects.items() if k[:3] == ("v1", "services", self.namespace)]
        addresses, listens = {}, {}
        for service in services:
            selector = (service.get("spec") or {}).get("selector") or {}
            for port in (service.get("spec") or {}).get("ports") or []:
                key = (service["metadata"]["name"], int(port["port"]))
                if key not in self.ports:
                    self.ports[key] = free_port()
                addresses[f"{key[0]}:{key[1]}"] = f"127.0.0.1:{self.ports[key]}"
                if selector and all(labels.get(k) == v for k, v in selector.items()):
                    listens[str(port.get("targetPort", port["port"]))] = str(self.ports[key])
        return addresses, listens

    def _relay(self, process: subprocess.Popen, pod: str, container: str) -> None:
        assert process.stdout is not None
        for line in iter(process.stdout.readline, b""):
            self.fake.append_log(pod, container, line.decode("utf-8", "replace"), self.namespace)

    def _pod_status(self, pod: PodProcess, phase: str) -> None:
        with self.fake._lock:
            stored = self.fake.objects.get(("v1", "pods", self.namespace, pod.name))
            if stored is None:
                return
            name = stored["spec"]["containers"][0]["name"]
            terminated = {
                "exitCode": pod.exit_code,
                "reason": "Completed" if pod.exit_code == 0 else "Error",
                "finishedAt": _now(),
            }
            conditions = stored["status"].get("conditions") or []
            stored["status"] = {
                "phase": phase,
                "containerStatuses": [
                    {"name": name, "ready": False, "restartCount": 0, "state": {"terminated": terminated}}
                ],
                "conditions": conditions,
            }
            if pod.disruption is not None and not DISRUPTIONS[pod.disruption][2]:  # the kubelet evicted it
                stored["status"].update(reason="Evicted", message=DISRUPTIONS[pod.disruption][0])


def _policy_action(spec: dict, code: int, disrupted: bool) -> str:
    """The action of the first podFailurePolicy rule that matches a failed pod (Count when none does): onExitCodes
    on its container's non-zero exit code, onPodConditions on its DisruptionTarget condition."""
    for rule in (spec.get("podFailurePolicy") or {}).get("rules") or []:
        on = rule.get("onExitCodes")
        if on:
            inside = code in on.get("values", [])
            if inside == (on.get("operator") == "In"):
                return rule["action"]
        for pattern in rule.get("onPodConditions") or []:
            if disrupted and pattern.get("type") == DISRUPTION_TARGET and pattern.get("status", "True") == "True":
                return rule["action"]
    return "Count"


def _rewrite(text: str, paths: dict[str, str]) -> str:
    for image_path, host in sorted(paths.items(), key=lambda item: -len(item[0])):
        text = text.replace(image_path, host)
    return text


def _kill(process: subprocess.Popen) -> None:
    if process.poll() is None:
        sweep_trial.stop(process, grace=10)  # its process group, as a pod's processes end


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
