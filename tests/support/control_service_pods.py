"""What the test Control Service (tests/support/control_service.py) starts in "Kubernetes": its builder (a Builder:
the builder image's entry point with the service's eleven arguments and variables, as a local process or a podman
container) and each execution's data-job pod (LauncherPod: its Job and pod in the fake API server, its container as a
local `vdk run ./<job>` with the pod's variables, restarted, stopped at the deadline, read at its end), and the
job's CronJob as the service renders it from its data-job template."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime
from datetime import timezone
from pathlib import Path
from typing import TYPE_CHECKING

import requests

if TYPE_CHECKING:
    from tests.support.control_service import Execution
    from tests.support.control_service import Job
    from tests.support.control_service import TestControlService

# (builder image, the eleven arguments, the variables) -> (exit status, log)
Builder = Callable[[str, list[str], dict[str, str]], tuple[int, str]]
BUILDER_MODULE = "vdk.plugin.ml_training.cli.builder_entry"
STATUS_OF = {
    "Success": "succeeded",
    "User error": "user_error",
    "Platform error": "platform_error",
    "Skipped": "skipped",
    "Cancelled": "cancelled",
    "Running": "running",
    "Submitted": "submitted",
}
SKIPPED_MESSAGE = "Skipping job execution due to another parallel running execution."
GRACE_SECONDS = 10  # terminationGracePeriodSeconds, shortened
MANIFEST_TYPES = ", ".join(
    (
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.oci.image.index.v1+json",
    )
)


def local_builder(extra_env: dict[str, str] | None = None, timeout: float = 600) -> Builder:
    """The builder image's entry point (`vdk-ml-training-builder`) as a process of this interpreter."""

    def run(image: str, args: list[str], env: dict[str, str]) -> tuple[int, str]:
        environment = {k: v for k, v in os.environ.items() if k != "REGISTRY_AUTH_FILE"}
        environment.update(env)
        environment.update(extra_env or {})
        done = subprocess.run(
            [sys.executable, "-m", BUILDER_MODULE, *args],
            env=environment,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        return done.returncode, done.stdout + done.stderr

    return run


def podman_builder(podman_root: Path, image: str, cache: Path, timeout: float = 900) -> Builder:
    """The builder as the Control Service runs it, a container of `image` (a base with git) through podman with the
    tests' private store: this project and its environment mounted read-only where they are here (the builder
    image's installation), the host's network (the tests' registry and git server are on loopback)."""
    from tests.support.debian_base import RUN_OPTIONS
    from tests.support.registry import podman_command

    project = Path(__file__).resolve().parents[2]
    python = Path(sys.base_prefix)

    def run(builder_image: str, args: list[str], env: dict[str, str]) -> tuple[int, str]:
        cache.mkdir(parents=True, exist_ok=True)
        variables = {**env, "VDK_ML_TRAINING_CACHE_DIR": str(cache), "HOME": "/tmp"}
        argv, engine_env = podman_command(
            podman_root,
            "run", "--rm", *RUN_OPTIONS,
            "-v", f"{python}:{python}:ro", "-v", f"{project}:{project}:ro", "-v", f"{cache}:{cache}",
            *(arg for key, value in variables.items() for arg in ("-e", f"{key}={value}")),
            image, sys.executable, "-m", BUILDER_MODULE, *args,
        )  # fmt: skip
        done = subprocess.run(argv, env=engine_env, capture_output=True, text=True, timeout=timeout)
        return done.returncode, done.stdout + done.stderr

    return run


def write_cronjob(service: TestControlService, job: Job, version: str) -> dict:
    """The job's CronJob in the data-jobs namespace, as the service renders it from its data-job template: its
    schedule, the deadline and retries, the template's service account, the job's container (named after the job,
    the image the builder pushed, the service's command, vdkOptions as variables)."""
    cron = (job.config.get("schedule") or {}).get("schedule_cron") or "0 0 30 2 *"
    pod = {
        "restartPolicy": "OnFailure",
        "containers": [
            {
                "name": job.name,
                "image": f"{service.registry}/{job.name}:{version}",
                "command": ["/bin/bash", "-c", f"export PYTHONPATH=... && /vdk/vdk run ./{job.name}"],
                "env": [{"name": k, "value": v} for k, v in {**service.vdk_options, "VDK_JOB_TEAM": job.team}.items()],
            }
        ],
    }
    if service.service_account:
        pod.update(serviceAccountName=service.service_account, automountServiceAccountToken=True)
    else:
        pod["automountServiceAccountToken"] = False
    cronjob = {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": job.name, "namespace": service.namespace},
        "spec": {
            "schedule": cron,
            "concurrencyPolicy": "Forbid",
            "jobTemplate": {
                "metadata": {
                    "labels": {"com.vmware.taurus/type": "DataJob", "com.vmware.taurus/name": job.name},
                    "annotations": {"com.vmware.taurus/execution-type": "scheduled"},
                },
                "spec": {
                    "activeDeadlineSeconds": service.deadline_seconds,
                    "backoffLimit": service.backoff_limit,
                    "template": {"spec": pod},
                },
            },
        },
    }
    key = ("batch/v1", "cronjobs", service.namespace, job.name)
    with service.fake._lock:
        service.fake.objects.pop(key, None)
    return service.fake.add("cronjobs", cronjob, service.namespace)


class LauncherPod:
    """One execution: its Job and pod in the fake API server, its container run (and run again) as the kubelet
    would, its log, its end read as the service reads it."""

    def __init__(self, service: TestControlService, job: Job, execution: Execution):
        self.service = service
        self.job = job
        self.execution = execution
        self.attempt = f"{execution.id}-{secrets.token_hex(3)[:5]}"
        self.lines: list[str] = []  # the log of the pod's current container
        self.restarts = 0
        self.process: subprocess.Popen | None = None
        self.cancelled = False
        self.deadline_exceeded = False
        self.started = time.time()
        self.termination = service.workdir / "termination" / self.attempt
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self._create_objects()
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def log_text(self) -> str:
        with self._lock:
            return "".join(self.lines)

    # --- Kubernetes objects ------------------------------------------------------------------------

    def _create_objects(self) -> None:
        service, job, execution = self.service, self.job, self.execution
        cronjob = service.fake.objects.get(("batch/v1", "cronjobs", service.namespace, job.name)) or {}
        template = ((cronjob.get("spec") or {}).get("jobTemplate")) or {"spec": {"template": {"spec": {}}}}
        annotations = {
            **(template.get("metadata") or {}).get("annotations", {}),
            "com.vmware.taurus/execution-type": execution.type,
            "com.vmware.taurus/started-by": execution.started_by,
        }
        k8s_job = {
            "apiVersion": "batch/v1",
            "kind": "Job",
            "metadata": {
                "name": execution.id,
                "labels": (template.get("metadata") or {}).get("labels", {}),
                "annotations": annotations,
            },  # fmt: skip
            "spec": template["spec"],
        }
        service.fake.add("jobs", k8s_job, service.namespace)
        service.fake.set_status("jobs", execution.id, {"active": 1, "startTime": _now()}, service.namespace)
        version = execution.deployment.get("job_version", "")
        image = f"{service.registry}/{job.name}:{version}"
        container = {"name": job.name, "image": image}
        status = {"phase": "Running", "containerStatuses": [{"name": job.name, "imageID": self._image_id(image)}]}
        pod = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": self.attempt, "labels": {"job-name": execution.id}},
            "spec": {"containers": [container], "restartPolicy": "OnFailure"},
            "status": status,
        }
        service.fake.add("pods", pod, service.namespace)

    def _image_id(self, image: str) -> str:
        """What the kubelet reports of the image it pulled: `repository@digest`."""
        host, _, rest = image.partition("/")
        repository, _, tag = rest.rpartition(":")
        answer = requests.head(f"http://{host}/v2/{repository}/manifests/{tag}", headers={"Accept": MANIFEST_TYPES})
        digest = answer.headers.get("Docker-Content-Digest", "")
        return f"{host}/{repository}@{digest}" if digest else ""

    # --- the container -----------------------------------------------------------------------------

    def _environment(self) -> dict[str, str]:
        service, execution = self.service, self.execution
        env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_") and k != "KUBECONFIG"}
        scratch = service.workdir / "var-tmp" / self.attempt
        scratch.mkdir(parents=True, exist_ok=True)
        env.update(
            VDK_ATTEMPT_ID=self.attempt,
            VDK_BASE_CONFIG_FOLDER=str(scratch),
            VDK_TEMPORARY_WRITE_DIRECTORY=str(scratch),
            LOG_CONFIG="CLOUD",
            MONITORING_ENABLED="true",
            VDK_JOB_TEAM=self.job.team,
            VDK_TERMINATION_MESSAGE_WRITER_OUTPUT_FILE=str(self.termination),
            VDK_EXECUTION_SKIP_CHECKER_ENABLED="false",
        )
        env.update(service.vdk_options)
        if service.kubeconfig is not None:  # the pod's service account, through a kubeconfig of its namespace
            env["KUBECONFIG"] = str(service.kubeconfig)
        if execution.type == "manual":
            env["VDK_OP_ID"] = execution.id
        return env

    def _run(self) -> None:
        service, execution = self.service, self.execution
        version = execution.deployment.get("job_version", "")
        image_dir = service.checkout(version, service.workdir / "images" / version)
        deadline = self.started + service.deadline_seconds
        with service.lock:
            execution.status = "running"
        while True:
            code = self._container(image_dir, deadline)
            message = self._termination_status()
            with service.lock:
                if self.cancelled:
                    break
                if self.deadline_exceeded:  # the Job failed with reason DeadlineExceeded
                    execution.status, execution.message = "user_error", "Job was active longer than specified deadline"
                    break
                if code == 0:
                    execution.status = STATUS_OF.get(message, "platform_error") if message else "succeeded"
                    if execution.status == "skipped":
                        execution.message = SKIPPED_MESSAGE
                    break
                self.restarts += 1
                if self.restarts > service.backoff_limit:
                    execution.status, execution.message = "platform_error", "BackoffLimitExceeded"
                    break
        with service.lock:
            execution.end_time = _now()
        if not self.cancelled:  # a cancel deleted the Job: no status to set
            service.fake.set_status("jobs", execution.id, {"active": 0, "conditions": [{"type": "Complete"}]},
                                    service.namespace)  # fmt: skip

    def _container(self, image_dir: Path, deadline: float) -> int:
        self.termination.parent.mkdir(parents=True, exist_ok=True)
        self.termination.unlink(missing_ok=True)
        args = ["run", f"./{self.job.name}"]
        if self.execution.args:
            import json

            args += ["--arguments", json.dumps(self.execution.args)]
        with self._lock:
            self.lines = []
            self.process = subprocess.Popen(
                [str(Path(sys.executable).with_name("vdk")), *args],
                cwd=image_dir,
                env=self._environment(),
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
            )
        process = self.process
        reader = threading.Thread(target=self._read, args=(process,), daemon=True)
        reader.start()
        try:
            process.wait(timeout=max(deadline - time.time(), 0.1))
        except subprocess.TimeoutExpired:
            self.deadline_exceeded = True
            self._stop(process)
        reader.join(30)
        return process.returncode

    def _read(self, process: subprocess.Popen) -> None:
        assert process.stdout is not None
        for raw in iter(process.stdout.readline, b""):
            line = raw.decode("utf-8", "replace")
            stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f") + "000Z"
            with self._lock:
                self.lines.append(f"{stamp} {line if line.endswith(chr(10)) else line + chr(10)}")

    def _termination_status(self) -> str | None:
        import json

        try:
            return json.loads(self.termination.read_text()).get("status")
        except (OSError, ValueError):
            return None

    def _stop(self, process: subprocess.Popen) -> None:
        """SIGTERM to the container, SIGKILL after the grace period."""
        if process.poll() is not None:
            return
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()

    def cancel(self) -> None:
        """What the service does: its Job deleted (Foreground: the Job has a deletion time while its pod stops),
        the execution cancelled at once."""
        service, execution = self.service, self.execution
        key = ("batch/v1", "jobs", service.namespace, execution.id)
        with service.fake._lock:
            stored = service.fake.objects.get(key)
            if stored is not None:
                stored["metadata"]["deletionTimestamp"] = _now()
        self.cancelled = True
        execution.status, execution.message = "cancelled", "Job execution cancelled by user."
        execution.end_time = _now()

        def stop() -> None:
            if self.process is not None:
                self._stop(self.process)
            with service.fake._lock:
                service.fake.objects.pop(key, None)

        threading.Thread(target=stop, daemon=True).start()

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()

    def crash(self) -> None:
        """The container killed (a node's OOM killer, a lost node): the kubelet starts it again."""
        self.kill()


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")
