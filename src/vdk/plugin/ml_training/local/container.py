"""A local run inside the job's image (`vdk run --container`): torchrun started as every backend's pod
starts it (the image's interpreter, `-m` the runtime's torch launcher, the runtime bootstrap, the pods'
environment and working directory, a /dev/shm of `shm_size`), with the local plan's layout and
settings (ranks, step limit, CPU adaptations) on top. The run directory is shared with the container
at the same path, so the launcher reads the ranks' result files as for a run on this machine."""

from __future__ import annotations

import json
import os
import secrets
import signal
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.local.container_engine import RUN_LABEL
from vdk.plugin.ml_training.local.container_engine import ContainerEngine
from vdk.plugin.ml_training.local.launch_plan import LaunchPlan
from vdk.plugin.ml_training.local.launcher import Attempt
from vdk.plugin.ml_training.local.lifeline import Lifeline
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.units import parse_quantity

# After SIGTERM to the container's torchrun (which passes it on to the ranks, which dump their stacks),
# how long before the engine kills what is left.
STOP_GRACE_SECONDS = 5
GUARD_MODULE = "vdk.plugin.ml_training.local.container_guard"


def inherited_env(gpus: int, spec: MLJobSpec | None = None) -> dict[str, str]:
    """What a container run takes from this process's environment: the runtime settings meant for the
    training processes, the variables of [ml-training.secrets] (a cluster's pods get them from Secrets),
    and which GPUs to use when it gets any. The rest of the shell (PATH, HOME, a virtualenv) has no
    business in the image."""
    secrets = [s.name for s in spec.secrets] if spec is not None else []
    names = [*protocol.USER_SETTINGS, *secrets, *(["CUDA_VISIBLE_DEVICES"] if gpus else [])]
    return {name: os.environ[name] for name in names if name in os.environ}


def container_env(env: dict[str, str], spec: MLJobSpec) -> dict[str, str]:
    """A run's environment (the plan's and the launcher's), with PYTHONPATH as the pods have it: the
    image's directories, then the user's."""
    return {**env, "PYTHONPATH": layout.launch_env(spec)["PYTHONPATH"]}


@dataclass
class ContainerStarter:
    """Starts a plan's torchrun in a container of `image` (in `container_engine`'s store) and stops it."""

    container_engine: ContainerEngine
    image: layout.JobImage  # the image's reference in the engine's store, and the interpreter it starts
    spec: MLJobSpec
    gpus: int = 0  # > 0: every GPU of this machine is passed through
    name: str = ""
    _lifeline: Lifeline | None = None
    _starts: int = 0

    def __post_init__(self) -> None:
        self.name = self.name or f"vdk-ml-{self.spec.name}-{secrets.token_hex(4)}"

    @property
    def engine(self) -> str:
        return self.container_engine.name

    def check(self) -> None:
        """Nothing to check here: the engine answered when the image was loaded into it."""

    def argv(self, plan: LaunchPlan, run_dir: Path, port: int, env: dict[str, str]) -> list[str]:
        engine = self.container_engine
        # the run directory; a second start's (the resume check) is in the first's, whose files it reads
        shared = env.get(protocol.FIRST_START_DIR) or str(run_dir)
        # As the pods start it (the image's interpreter, torch's launcher, the bootstrap), with the plan's
        # layout; a smoke run forks its ranks from torchrun as on this machine (FORK: 1-2 s faster per rank).
        command = [
            self.image.python,
            "-m",
            layout.LAUNCHER_MODULE,
            *plan.torchrun_flags(run_dir, port),
            *plan.bootstrap(layout.BOOTSTRAP_PATH),
            *self.spec.command_args(smoke=plan.mode == protocol.SMOKE),
        ]
        return engine.argv(
            "run",
            "--rm",
            "--name",
            self.name,
            "--label",
            f"{RUN_LABEL}={self.spec.name}",
            "--pull=never",  # the image is in the store; never look for it elsewhere
            *engine.run_options,
            "--workdir",
            layout.JOB_DIR,
            "--shm-size",
            str(int(parse_quantity(self.spec.shm_size))),
            *(engine.gpu_options() if self.gpus else []),
            "-v",
            f"{shared}:{shared}:z",
            *(arg for d in plan.data for arg in ("-v", f"{d.path.resolve()}:{layout.JOB_DIR}/{d.target}:ro")),
            *(arg for name, value in container_env(env, self.spec).items() for arg in ("-e", f"{name}={value}")),
            "--entrypoint",
            command[0],
            self.image.reference,
            *command[1:],
        )

    def prepare(self, plan: LaunchPlan, run_dir: Path) -> None:
        """None: the ranks work in the image's job directory, which holds what the code layer holds."""

    def start(self, attempt: Attempt) -> subprocess.Popen:
        _share(attempt.run_dir)
        self._starts += 1
        if self._starts > 1:  # a second start (the resume check): a container of its own, whatever is left of the first
            self.name = f"{self.name.split('--', 1)[0]}--{self._starts}"
        self.release()  # a previous attempt's (another port)
        lifeline = self._lifeline = Lifeline()
        # The engine's client, under a guard that stops the container if vdk is killed (local/container_guard.py).
        stop_commands = self.container_engine.stop_commands(self.name, STOP_GRACE_SECONDS)
        client = self.argv(attempt.plan, attempt.run_dir, attempt.port, attempt.env)
        proc = subprocess.Popen(
            [sys.executable, "-m", GUARD_MODULE, json.dumps(stop_commands), "--", *client],
            env={**os.environ, **lifeline.env()},
            stdin=subprocess.DEVNULL,
            stdout=attempt.stdout,
            stderr=attempt.stderr,
            pass_fds=(lifeline.read_fd,),
            start_new_session=True,  # Ctrl-C reaches us only; we stop the container ourselves
        )
        lifeline.started()
        return proc

    def ended(self, proc: subprocess.Popen, run_dir: Path) -> None:
        """Nothing to do: the container's end took every process in it (`--rm` removed it)."""

    def stop(self, proc: subprocess.Popen, run_dir: Path) -> None:
        self.container_engine.stop(self.name, STOP_GRACE_SECONDS)
        try:
            proc.wait(timeout=STOP_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the guard and the engine's client
            except ProcessLookupError:
                pass
            proc.wait()

    def release(self) -> None:
        if self._lifeline is not None:
            self._lifeline.cut()
            self._lifeline = None


def _share(run_dir: Path) -> None:
    """The image's user may be another uid than ours: let it write the result files and open rank 0's
    FIFO. The run directory is inside our private (0700) runs directory, so nobody else reaches it."""
    os.chmod(run_dir, 0o777)
    for entry in run_dir.iterdir():
        if stat.S_ISFIFO(entry.stat().st_mode):
            os.chmod(entry, 0o666)
