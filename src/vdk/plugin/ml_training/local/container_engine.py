"""The container engine of this machine (podman or Docker), driven through its command line.

`VDK_ML_TRAINING_CONTAINER_ENGINE` (VDK key `ml_training_container_engine`) names the engine's command,
with any global options (`podman --storage-driver vfs`); without it podman is used if installed, else
docker. `VDK_ML_TRAINING_CONTAINER_RUN_OPTIONS` adds options to every `run` (`--network host`, `-v ...`).

Adapted to the host where that is safe: on a machine whose process limits cannot be raised (rootless, or root
without CAP_SYS_RESOURCE: a container, a restricted VM), the engine's default limits (podman as root asks for
1048576 open files) make `runc create` fail; the container then gets this machine's own limits (`--ulimit`, as
a local run has them), unless the run options set limits themselves.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.host_limits import HostLimits
from vdk.plugin.ml_training.host_limits import host_limits
from vdk.plugin.ml_training.job.keys import variable
from vdk.plugin.ml_training.vocabulary.wire import PROJECT

ENGINE_VARIABLE = variable("container_engine")

ENGINES = ("podman", "docker")  # in the order they are looked for
PODMAN = "podman"
DOCKER = "docker"
# Where `vdk run --container` keeps the job images it loaded: one tag per job, the older image removed.
LOCAL_REPOSITORY = f"localhost/{PROJECT}"
# Containers of container runs carry it (value: the job's name), so that leftovers can be found.
RUN_LABEL = "io.vdk.ml-training.container-run"
_QUICK_SECONDS = 60


@dataclass(frozen=True)
class ContainerEngine:
    """An engine's command (with its global options), its kind, and the options added to every `run`."""

    command: tuple[str, ...]
    kind: str  # PODMAN or DOCKER (Docker-compatible command lines)
    options: tuple[str, ...] = ()  # the user's (VDK_ML_TRAINING_CONTAINER_RUN_OPTIONS)
    host_options: tuple[str, ...] = ()  # added for this host (`adapted_options`)

    @property
    def name(self) -> str:
        return Path(self.command[0]).name

    @property
    def run_options(self) -> tuple[str, ...]:
        """The options of every `run`: this host's adaptations, then the user's (which win)."""
        return (*self.host_options, *self.options)

    def argv(self, *args: str) -> list[str]:
        return [*self.command, *args]

    def check(self) -> None:
        """The engine answers; else an error that says what to do (a Docker daemon that is not running)."""
        done = self._run("version", timeout=_QUICK_SECONDS)
        if done.returncode != 0:
            detail = _last_line(done.stderr) or f"exit code {done.returncode}"
            other = PODMAN if self.kind == DOCKER else DOCKER
            raise MLTrainingError(
                f"the container engine `{shlex.join(self.command)}` does not work: {detail}",
                f"start it (for Docker: its daemon), or use {other} ({ENGINE_VARIABLE}={other})",
            )

    def image_id(self, reference: str) -> str | None:
        """The ID (`sha256:...`, the config's digest) of an image in the engine's store, or None."""
        done = self._run("image", "inspect", "--format", "{{.Id}}", reference, timeout=_QUICK_SECONDS)
        if done.returncode != 0:
            return None
        found = done.stdout.strip().splitlines()
        if not found:
            return None
        return found[0] if found[0].startswith("sha256:") else f"sha256:{found[0]}"

    def pull(self, reference: str, say: Callable[[str], None]) -> None:
        """Pull from a loopback registry served over plain HTTP; the engine's own lines go to `say`."""
        insecure = ["--tls-verify=false"] if self.kind == PODMAN else []  # Docker: 127.0.0.0/8 is insecure already
        proc = subprocess.Popen(
            self.argv("pull", *insecure, reference),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
        last = ""
        assert proc.stderr is not None
        try:
            with proc.stderr:
                for line in proc.stderr:
                    if line.strip():
                        last = line.strip()
                        say(f"  {self.name}: {last}")
        except BaseException:  # Ctrl-C: the pull stops with us
            proc.terminate()
            proc.wait()
            raise
        if proc.wait() != 0:
            hint = (
                "a rootless Docker daemon or Docker Desktop cannot reach this machine's 127.0.0.1, from where the "
                f"image is served: use podman ({ENGINE_VARIABLE}=podman)"
                if self.kind == DOCKER
                else "see the engine's message above"
            )
            raise MLTrainingError(f"{self.name} could not load the job image: {last or proc.returncode}", hint)

    def tag(self, image: str, reference: str) -> None:
        self._checked("tag", image, reference)

    def remove_image(self, image: str) -> bool:
        """Remove an image that no container uses; False if the engine refused (in use, gone)."""
        return self._run("rmi", image, timeout=_QUICK_SECONDS).returncode == 0

    def keep_only(self, repository: str, keep: str) -> None:
        """Remove the images tagged `repository:*` but `keep` (those a container uses stay)."""
        done = self._run("images", "--format", "{{.Repository}}:{{.Tag}}", repository, timeout=_QUICK_SECONDS)
        for name in done.stdout.split() if done.returncode == 0 else []:
            if name != keep and name.startswith(f"{repository}:"):
                self.remove_image(name)

    def stop(self, container: str, grace_seconds: int) -> None:
        """SIGTERM to the container's first process, SIGKILL after `grace_seconds`; then remove it."""
        self._run("stop", "-t", str(grace_seconds), container, timeout=grace_seconds + _QUICK_SECONDS)
        self._run("rm", "-f", container, timeout=_QUICK_SECONDS)

    def stop_commands(self, container: str, grace_seconds: int) -> list[list[str]]:
        """The command lines of `stop`, for a process that stops the container when vdk cannot."""
        return [self.argv("stop", "-t", str(grace_seconds), container), self.argv("rm", "-f", container)]

    def gpu_options(self) -> list[str]:
        """Every GPU of this machine in the container: podman through CDI (nvidia-ctk generates the spec),
        Docker through the NVIDIA container toolkit. (`nvidia.com/gpu` here is CDI's device kind, not Kubernetes'
        resource of the same name.)"""
        return ["--device", "nvidia.com/gpu=all"] if self.kind == PODMAN else ["--gpus", "all"]

    def _checked(self, *args: str) -> subprocess.CompletedProcess:
        done = self._run(*args, timeout=_QUICK_SECONDS)
        if done.returncode != 0:
            raise MLTrainingError(
                f"`{shlex.join(self.argv(*args))}` failed: {_last_line(done.stderr) or done.returncode}",
                "see the engine's message",
            )
        return done

    def _run(self, *args: str, timeout: float) -> subprocess.CompletedProcess:
        try:
            return subprocess.run(
                self.argv(*args), capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL, check=False
            )
        except subprocess.TimeoutExpired:
            return subprocess.CompletedProcess(self.argv(*args), 124, "", f"no answer within {timeout:.0f} s")


def find_engine(command: str | None = None, run_options: str | None = None) -> ContainerEngine:
    """The engine `command` names (VDK_ML_TRAINING_CONTAINER_ENGINE), else podman, else docker."""
    options = tuple(shlex.split(run_options or ""))
    if command and command.strip():
        argv = tuple(shlex.split(command))
        if shutil.which(argv[0]) is None:
            raise MLTrainingError(
                f"{ENGINE_VARIABLE} is `{command}`, but `{argv[0]}` is not installed",
                f"install it, or set {ENGINE_VARIABLE} to podman or docker",
            )
        return ContainerEngine(argv, _kind(argv[0]), options, adapted_options(options))
    for name in ENGINES:
        path = shutil.which(name)
        if path:
            return ContainerEngine((name,), name, options, adapted_options(options))
    raise MLTrainingError(
        "`vdk run --container` runs the job's image with podman or docker, and neither is installed",
        "install podman (`apt-get install podman`, `dnf install podman`) or Docker, or set "
        f"{ENGINE_VARIABLE} to the command of another Docker-compatible engine",
    )


def adapted_options(user_options: tuple[str, ...], limits: HostLimits | None = None) -> tuple[str, ...]:
    """`--ulimit` at this machine's limits where they cannot be raised to the engine's defaults, unless the user's
    run options set limits (`--ulimit`) themselves."""
    if any(option == "--ulimit" or option.startswith("--ulimit=") for option in user_options):
        return ()
    limits = limits or host_limits()
    return () if limits.can_raise else tuple(limits.ulimit_options())


def _kind(program: str) -> str:
    return PODMAN if Path(program).name.startswith(PODMAN) else DOCKER


def _last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
