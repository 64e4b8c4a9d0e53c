"""A local cluster for the end-to-end tests: a run's manifests, as `vdk deploy` renders them, become the
pods their controller would create (controllers.py), and each pod runs as one podman container of the
pushed image, pulled from the test registry.

Per pod it honours what the kubelet would: the container's command and args (command replaces the
image's entrypoint, and with it its cmd), its working directory (else the image's), its environment in
order with later duplicates winning, `valueFrom.fieldRef` resolved against the pod's metadata and
`$(VAR)` references expanded, the pod's hostname, and its volumes: a memory-backed emptyDir at /dev/shm
is the container's /dev/shm of that size, other emptyDirs and PersistentVolumeClaims are directories
under the cluster's work directory (a claim's directory is shared by every pod that mounts it, as a
ReadWriteMany volume). All containers share the host's network, CPU only; the names pods reach each
other by (hostname, hostname.subdomain, the Services of a PyTorchJob's replicas) resolve to 127.0.0.1.

Not emulated: scheduling and resource limits (no cgroups here), restarts by themselves (`restart_policy` is
kept on each pod; a failed container stays failed until a test restarts it with `RunningPods.restart`, as
the kubelet would under OnFailure: the same pod, its volumes and their files as they were), init containers
(the operator's wait for the master's DNS name: here every name resolves at once), probes, Services beyond
name resolution, and the controllers' reactions to a failure (a Job's podFailurePolicy deleting the other
pods): the other replicas must stop by themselves, which is what the tests check. `RunResult.pods()` shows
the containers as the API would show their pods, for the plugin's own diagnosis (k8s/runs/pod_states.py).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field
from datetime import datetime
from datetime import timezone
from pathlib import Path

from tests.support.controllers import STATUS_VOLUME
from tests.support.controllers import Pod
from tests.support.controllers import pods as controller_pods
from tests.support.debian_base import RUN_OPTIONS
from tests.support.registry import podman
from tests.support.registry import podman_command
from tests.support.trainer_status_server import SERVICE_HOST
from vdk.plugin.ml_training.k8s.runs import pod_states
from vdk.plugin.ml_training.units import parse_quantity

SHM_PATH = "/dev/shm"
_FIELD_PATH = re.compile(r"^metadata\.(labels|annotations)\['([^']+)'\]$")
_VARIABLE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")
_POLL_SECONDS = 0.2


def resolve_env(env: list[dict], pod: Pod) -> dict[str, str]:
    """A container's environment as the kubelet builds it: in order, `$(VAR)` of earlier variables
    expanded (`$$` is a literal `$`), field references resolved, the last of two equal names winning."""
    out: dict[str, str] = {}
    for entry in env:
        if "value" in entry:
            out[entry["name"]] = expand(str(entry["value"]), out)
        elif "valueFrom" in entry:
            out[entry["name"]] = _field(entry["valueFrom"], pod)
        else:
            out[entry["name"]] = ""
    return out


def expand(text: str, env: dict[str, str]) -> str:
    """Kubernetes' `$(VAR)` expansion: unknown references stay as written."""

    def one(match: re.Match) -> str:
        if match.group(0) == "$$":
            return "$"
        return env.get(match.group(1), match.group(0))

    return _VARIABLE.sub(one, text)


def _field(source: dict, pod: Pod) -> str:
    ref = source.get("fieldRef")
    if ref is None:
        raise NotImplementedError(f"only fieldRef sources are emulated, not {sorted(source)}")
    path = ref["fieldPath"]
    simple = {
        "metadata.name": pod.name,
        "metadata.namespace": "default",
        "spec.nodeName": "localhost",
        "status.podIP": "127.0.0.1",
        "status.hostIP": "127.0.0.1",
    }
    if path in simple:
        return simple[path]
    match = _FIELD_PATH.match(path)
    if match:
        values = pod.labels if match.group(1) == "labels" else pod.annotations
        if match.group(2) in values:
            return values[match.group(2)]
    raise ValueError(f"pod {pod.name} has nothing at {path} (the kubelet would refuse to start it)")


@dataclass
class Replica:
    """One pod, run as a container."""

    pod: Pod
    container_name: str
    log: Path
    process: subprocess.Popen | None = None
    started: float = 0.0  # time.monotonic()
    ended: float | None = None
    ended_at: str | None = None  # RFC 3339, as a pod's finishedAt
    exit_code: int | None = None

    def output(self) -> str:
        return self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""

    def poll(self) -> bool:
        """Whether it has ended (recording when)."""
        if self.ended is not None:
            return True
        if self.process is None or self.process.poll() is None:
            return False
        self.ended = time.monotonic()
        self.ended_at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        self.exit_code = self.process.returncode
        return True


@dataclass
class RunResult:
    backend: str
    replicas: list[Replica]
    timed_out: bool = False
    created_at: str = field(default_factory=lambda: datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"))

    @property
    def succeeded(self) -> bool:
        return not self.timed_out and all(r.exit_code == 0 for r in self.replicas)

    def outputs(self) -> str:
        return "\n".join(f"--- {r.pod.name} (exit {r.exit_code}) ---\n{r.output()}" for r in self.replicas)

    def pods(self) -> list[dict]:
        """The replicas as the API shows their pods (what `vdk show` reads)."""
        return [_pod_object(r, self.created_at) for r in self.replicas]

    def first_failure(self) -> tuple[pod_states.RankState, pod_states.Termination] | None:
        """The rank the plugin blames for the failure (k8s/runs/pod_states.py), from the pods' states."""
        found = pod_states.failing_rank(pod_states.rank_states(self.pods(), self.backend))
        return (found[0], found[1]) if found else None


def _pod_object(replica: Replica, created_at: str) -> dict:
    pod = replica.pod
    name = pod.container["name"]
    if replica.exit_code is None:
        state: dict = {"running": {}}
        phase = "Running"
    else:
        state = {
            "terminated": {
                "exitCode": replica.exit_code,
                "reason": "Completed" if replica.exit_code == 0 else "Error",
                "finishedAt": replica.ended_at,
            }
        }
        phase = "Succeeded" if replica.exit_code == 0 else "Failed"
    return {
        "metadata": {
            "name": pod.name,
            "labels": dict(pod.labels),
            "annotations": dict(pod.annotations),
            "creationTimestamp": created_at,
        },
        "spec": {"containers": [pod.container], "nodeName": "localhost", "restartPolicy": pod.restart_policy},
        "status": {
            "phase": phase,
            "containerStatuses": [{"name": name, "ready": False, "restartCount": 0, "state": state}],
        },
    }


class LocalCluster:
    """Runs the pods of rendered runs with podman (storage in `podman_root`); files in `workdir`."""

    def __init__(self, podman_root: Path, workdir: Path, run_options: tuple[str, ...] = RUN_OPTIONS):
        self.podman_root = podman_root
        self.workdir = workdir
        self.run_options = run_options
        self._runs = 0
        self.pulled: list[str] = []  # images this cluster pulled (see `remove_images`)
        self.projected: dict[str, Path] = {}  # the files of each projected volume, by volume name

    def run(
        self, manifests: list[dict], backend: str, port: int, timeout: float = 600, trainer_status=None
    ) -> RunResult:
        """Start every pod of the run, and wait until all have ended (or `timeout`, then stop them)."""
        running = self.start(manifests, backend, port, trainer_status)
        return running.wait(timeout)

    def start(self, manifests: list[dict], backend: str, port: int, trainer_status=None) -> RunningPods:
        """`trainer_status`: a TrainerStatusServer (tests/support/trainer_status_server.py): Trainer's TrainJobStatus
        gate is on, its status server reachable by its Service's name, the pods' projected token and CA its files."""
        status_url = None
        if trainer_status is not None:
            status_url = f"https://{SERVICE_HOST}:{trainer_status.port}"
            self.projected[STATUS_VOLUME] = trainer_status.files
        pods = controller_pods(manifests, backend, port, status_url)
        self._runs += 1
        run_dir = self.workdir / f"run-{self._runs}-{backend}"
        run_dir.mkdir(parents=True, exist_ok=True)
        for image in sorted({p.container["image"] for p in pods}):
            self._pull(image)
        hosts = [name for p in pods for name in p.dns_names] + ([SERVICE_HOST] if status_url else [])
        replicas = []
        for pod in pods:
            replica = Replica(pod, f"{run_dir.name}-{pod.name}", run_dir / f"{pod.name}.log")
            self._start(replica, hosts, run_dir)
            replicas.append(replica)
        return RunningPods(self, backend, replicas, hosts, run_dir)

    def _start(self, replica: Replica, hosts: list[str], run_dir: Path) -> None:
        argv, env = self._run_argv(replica, hosts, run_dir)
        replica.started = time.monotonic()
        with open(replica.log, "wb") as log:
            replica.process = subprocess.Popen(
                argv, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT
            )

    def _pull(self, image: str) -> None:
        """imagePullPolicy IfNotPresent: pulled from the registry unless podman has it."""
        if podman(self.podman_root, "image", "exists", image, check=False).returncode != 0:
            podman(self.podman_root, "pull", "--tls-verify=false", image, timeout=900)
            self.pulled.append(image)

    def remove_images(self) -> None:
        """Remove the images this cluster pulled (with vfs each is gigabytes: every layer a full copy)."""
        for image in self.pulled:
            podman(self.podman_root, "rmi", "--force", image, check=False)
        self.pulled.clear()

    def _run_argv(self, replica: Replica, hosts: list[str], run_dir: Path) -> tuple[list[str], dict[str, str]]:
        pod, container = replica.pod, replica.pod.container
        env = resolve_env(container.get("env") or [], pod)
        options = ["--name", replica.container_name, "--rm", "--pull=never", *self.run_options]
        options += ["--hostname", pod.hostname, *(a for h in hosts for a in ("--add-host", f"{h}:127.0.0.1"))]
        options += self._volume_options(pod, run_dir)
        if container.get("workingDir"):
            options += ["--workdir", container["workingDir"]]
        options += [a for name, value in env.items() for a in ("-e", f"{name}={value}")]
        command = [expand(c, env) for c in container.get("command") or []]
        args = [expand(a, env) for a in container.get("args") or []]
        if command:  # the kubelet: command replaces the entrypoint, and the image's cmd is not used
            options += ["--entrypoint", command[0]]
            tail = [*command[1:], *args]
        else:
            tail = args
        return podman_command(self.podman_root, "run", *options, container["image"], *tail)

    def _volume_options(self, pod: Pod, run_dir: Path) -> list[str]:
        volumes = {v["name"]: v for v in pod.volumes}
        options: list[str] = []
        for mount in pod.container.get("volumeMounts") or []:
            volume = volumes[mount["name"]]
            path = mount["mountPath"]
            read_only = ":ro" if mount.get("readOnly") else ""
            if "emptyDir" in volume and (volume["emptyDir"] or {}).get("medium") == "Memory":
                size = (volume["emptyDir"] or {}).get("sizeLimit")
                if path == SHM_PATH:
                    options += ["--shm-size", str(int(parse_quantity(size))) if size else "64m"]
                else:
                    options += ["--mount", f"type=tmpfs,destination={path}" + (f",tmpfs-size={size}" if size else "")]
            elif "emptyDir" in volume:
                host = run_dir / "volumes" / pod.name / volume["name"]
                host.mkdir(parents=True, exist_ok=True)
                options += ["-v", f"{host / mount.get('subPath', '')}:{path}{read_only}"]
            elif "projected" in volume:  # the kubelet writes its sources' files (a token, a CA): the test's here
                options += ["-v", f"{self.projected[volume['name']]}:{path}:ro"]
            elif "persistentVolumeClaim" in volume:
                host = self.workdir / "claims" / volume["persistentVolumeClaim"]["claimName"] / mount.get("subPath", "")
                host.mkdir(parents=True, exist_ok=True)
                options += ["-v", f"{host}:{path}{read_only}"]
            else:
                raise NotImplementedError(f"volume {volume['name']} of pod {pod.name}: only emptyDir, PVCs, projected")
        return options

    def kill(self, replica: Replica, signal: str = "KILL") -> None:
        podman(self.podman_root, "kill", "--signal", signal, replica.container_name, check=False)


@dataclass
class RunningPods:
    cluster: LocalCluster
    backend: str
    replicas: list[Replica]
    hosts: list[str] = field(default_factory=list)
    run_dir: Path | None = None

    def restart(self, replica: int) -> int:
        """Start an ended replica's pod again, as the kubelet restarts a container under OnFailure (its
        volumes as the first attempt left them); returns the new attempt's index among the replicas."""
        old = self.replicas[replica]
        assert old.poll(), f"{old.pod.name} is still running"
        attempt = sum(1 for r in self.replicas if r.pod.name == old.pod.name)
        again = Replica(old.pod, f"{old.container_name}-{attempt}", old.log.with_name(f"{old.pod.name}-{attempt}.log"))
        self.cluster._start(again, self.hosts, self.run_dir)
        self.replicas.append(again)
        return len(self.replicas) - 1

    def wait_for(self, replica: int, condition: Callable[[str], bool], timeout: float) -> bool:
        """Until `condition(output)` holds for a replica's output; False when it ended first or at timeout."""
        deadline = time.monotonic() + timeout
        target = self.replicas[replica]
        while time.monotonic() < deadline:
            if condition(target.output()):
                return True
            if target.poll():
                return condition(target.output())
            time.sleep(_POLL_SECONDS)
        return False

    def kill(self, replica: int) -> float:
        """SIGKILL a replica's container (exit code 137, as an OOM kill or a lost node shows it); returns when."""
        self.cluster.kill(self.replicas[replica])
        return time.monotonic()

    def wait(self, timeout: float) -> RunResult:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(r.poll() for r in self.replicas):
                return RunResult(self.backend, self.replicas)
            time.sleep(_POLL_SECONDS)
        for replica in self.replicas:
            if not replica.poll():
                self.cluster.kill(replica)
        for replica in self.replicas:
            if replica.process is not None:
                replica.process.wait(60)
            replica.poll()
        return RunResult(self.backend, self.replicas, timed_out=True)
