"""What a local run starts: the torchrun command, its processes and their environment.

A smoke run starts `smoke_processes` CPU ranks with the CPU stand-ins, as many virtual GPUs and the step
limit (for a script that spawns its own workers: one launcher process, whose `smoke_processes` workers
are the ranks); a full run starts the job's own layout for one node, with no stand-ins, on the GPUs of
this machine if any.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path

from vdk.plugin.ml_training import layout
from vdk.plugin.ml_training.job import RESERVED_ENV
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.local.data_links import LocalDataset
from vdk.plugin.ml_training.local.overlay import Overlay
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.runtime.gpu_sampler import SamplerSettings
from vdk.plugin.ml_training.runtime.mlflow_runs import TRACKING_URI
from vdk.plugin.ml_training.runtime.watchdog import WatchdogSettings
from vdk.plugin.ml_training.source.job_files import FileSet
from vdk.plugin.ml_training.vocabulary.human_units import counted
from vdk.plugin.ml_training.vocabulary.wire import ENV_PREFIX

ACCELERATE_USE_CPU = "ACCELERATE_USE_CPU"
# Inherited settings that would make torchrun or the ranks use another run's layout.
_FOREIGN_PREFIXES = ("PET_", "TORCHELASTIC_")
AGENT_MODULE = "vdk.plugin.ml_training.local.torchrun_agent"
FORK = "fork"  # ranks forked from torchrun's agent, which has imported torch already: ~1.3 s faster
SPAWN = "spawn"  # ranks are fresh interpreters started by torchrun, as in a job image


@dataclass(frozen=True)
class LaunchPlan:
    spec: MLJobSpec
    mode: str  # protocol.SMOKE or protocol.FULL
    processes: int
    timeout_seconds: int | None
    start_method: str  # FORK or SPAWN
    env: Mapping[str, str]
    notes: tuple[str, ...] = field(default=())
    gpus: int = 0  # GPUs the ranks may use
    workers: int = 0  # smoke run of a script that spawns its own workers: how many (they are the ranks)
    data: tuple[LocalDataset, ...] = ()  # the datasets at their targets in the working directory (data_links.py)
    files: FileSet | None = None  # the job directory's files, when the command found them already (else: at start)

    @property
    def ranks(self) -> int:
        """Training processes: those torchrun starts, or the workers its one process spawns."""
        return self.workers or self.processes

    @property
    def timeout_setting(self) -> str:
        return "smoke_timeout" if self.mode == protocol.SMOKE else "max_runtime"

    def torchrun_flags(self, run_dir: Path, port: int) -> list[str]:
        """One node of `processes` ranks; a static rendezvous on a port we chose: 0.2-0.3 s faster than
        --standalone's c10d one."""
        return [
            "--rdzv-backend=static",
            "--master-addr=127.0.0.1",
            f"--master-port={port}",
            "--nnodes=1",
            "--node-rank=0",
            f"--nproc-per-node={self.processes}",
            "--max-restarts=0",
            f"--log-dir={run_dir / 'torchrun'}",
        ]

    def bootstrap(self, bootstrap_file: str) -> list[str]:
        """How torchrun starts the bootstrap: its file, in ranks forked from torchrun's process (FORK), or
        its module, in fresh interpreters (SPAWN, as job images start it)."""
        if self.start_method == FORK:
            return ["--run-path", "--start-method=fork", bootstrap_file]
        return ["-m", layout.BOOTSTRAP_MODULE]

    def command(self, run_dir: Path, port: int) -> list[str]:
        from vdk.plugin.ml_training.runtime import bootstrap

        # torch.distributed.run itself, in a process that skips the interpreter's teardown (local/torchrun_agent.py)
        return [
            sys.executable,
            "-m",
            AGENT_MODULE,
            *self.torchrun_flags(run_dir, port),
            *self.bootstrap(bootstrap.__file__),
            *self.spec.command_args(smoke=self.mode == protocol.SMOKE),
        ]


def default_start_method() -> str:
    # fork is safe here because the agent has not touched a GPU; macOS forbids fork after some
    # system frameworks are loaded, so it keeps fresh interpreters.
    return FORK if sys.platform.startswith("linux") else SPAWN


def smoke_plan(
    spec: MLJobSpec,
    start_method: str | None = None,
    inherited: Mapping[str, str] | None = None,
    overlay: Overlay | None = None,
    files: FileSet | None = None,
) -> LaunchPlan:
    """`inherited`: the environment the ranks start from (default: this process's). `overlay`: the job's
    requirements, installed for this interpreter, on the ranks' path ahead of site-packages (local/overlay.py).
    `files`: the job directory's files as the command found them already (its working directory gets them)."""
    workers = spec.smoke_processes if spec.spawns_workers else 0
    processes = 1 if workers else spec.smoke_processes
    ranks = workers or processes
    env = _user_env(spec, inherited, overlay)
    for name, value in {
        # one process per core at most: two ranks of two threads each on two cores crawl
        "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // ranks)),
        "PYTHONUNBUFFERED": "1",  # rank 0's prints show up as they happen
        "WANDB_MODE": "disabled",  # a smoke run is no experiment
        "TOKENIZERS_PARALLELISM": "false",  # else HF tokenizers warn about every fork
    }.items():
        env.setdefault(name, value)
    env.update(
        {
            "CUDA_VISIBLE_DEVICES": "",  # real GPUs stay out of it: the ranks see virtual ones
            protocol.MODE: protocol.SMOKE,
            protocol.SMOKE_STEPS: str(spec.smoke_steps),
            protocol.SMOKE_GPUS: str(smoke_gpus(spec)),
            protocol.DEVICE_TRACKING: "1" if spec.smoke_device_tracking else "0",
            protocol.EPOCH_END: "1" if spec.smoke_epoch_end else "0",
            protocol.RESUME: spec.resume,
        }
    )
    if workers:
        env[protocol.SPAWNED_WORKERS] = str(workers)
    return LaunchPlan(
        notes=(*secret_notes(spec, env), *([overlay.summary()] if overlay else [])),
        spec=spec,
        mode=protocol.SMOKE,
        processes=processes,
        timeout_seconds=spec.smoke_timeout_seconds,
        start_method=start_method or default_start_method(),
        env=env,
        workers=workers,
        files=files,
    )


def smoke_gpus(spec: MLJobSpec) -> int:
    """The virtual GPUs of the smoke run's node: as many per rank as the job's processes have on its nodes
    (every process of a node sees all of the node's GPUs, as under torchrun), none for a CPU-only job
    unless it rehearses GPU code on CPU (VDK_ML_TRAINING_ADAPT_TO_CPU: one per process, as on its nodes)."""
    devices = spec.gpus_per_node.devices
    if devices == 0 and protocol.switched_on(protocol.ADAPT_TO_CPU, spec.env_dict):
        devices = spec.procs_per_node  # CPU nodes rehearsing GPU code: a virtual GPU per process, as there
    if devices == 0:
        return 0
    if spec.spawns_workers:
        return spec.smoke_processes  # one per worker, as the script asks for
    return max(1, math.ceil(spec.smoke_processes * devices / spec.procs_per_node))


def full_plan(
    spec: MLJobSpec,
    gpus: int | None = None,
    inherited: Mapping[str, str] | None = None,
    overlay: Overlay | None = None,
) -> LaunchPlan:
    """`inherited`: the environment the ranks start from (default: this process's). `overlay`: as for
    `smoke_plan`."""
    gpus = visible_gpus() if gpus is None else gpus
    wanted = spec.procs_per_node
    notes = []
    if spec.spawns_workers:
        notes.append(f"{spec.entrypoint} starts its own workers (mp.spawn): torchrun runs it as one launcher process")
    if spec.nodes.max > 1:
        notes.append(
            f"runs one node of the job's {spec.nodes} ({counted(wanted, 'process')}); the cluster runs "
            f"{spec.nodes} × {wanted}"
        )
    env = _user_env(spec, inherited, overlay)
    if overlay is not None:
        notes.append(overlay.summary())
    if gpus:
        processes = min(wanted, gpus)
        if processes < wanted:
            notes.append(f"procs_per_node = {wanted}, but this machine has {counted(gpus, 'GPU')}: running {processes}")
    else:
        cores = os.cpu_count() or 1
        processes = min(wanted, cores)
        capped = f" (procs_per_node = {wanted}, capped to the {cores} CPU cores)" if processes < wanted else ""
        # Without it, transformers' TrainingArguments and Accelerate see no GPU, initialise a process
        # group but run in non-distributed mode: every rank trains on all the data. It is what
        # `accelerate launch --cpu` sets; both libraries read it, other code does not. The job's or
        # the shell's own value wins.
        env.setdefault(ACCELERATE_USE_CPU, "true")
        notes.append(
            f"no GPU on this machine: running on CPU with {counted(processes, 'process')}{capped}, "
            f"{ACCELERATE_USE_CPU}={env[ACCELERATE_USE_CPU]} (with true, HF Trainer and Accelerate train "
            "distributed on CPU); code that hard-codes CUDA or NCCL needs a GPU (the smoke run, the default, "
            "adapts it to CPU)"
        )
    env.update(WatchdogSettings(spec.stall_timeout_seconds, spec.startup_timeout_seconds).env())
    used = min(gpus, spec.gpus_per_node.devices if spec.spawns_workers else processes)  # the GPUs it samples
    env.update(SamplerSettings(spec.gpu_sample_period_seconds, spec.idle_timeout_seconds, used).env())
    env[protocol.MODE] = protocol.FULL
    env[protocol.RESUME] = spec.resume
    if spec.mlflow_tracking_uri:  # the shell's MLFLOW_TRACKING_URI (or the job's) wins
        env.setdefault(TRACKING_URI, spec.mlflow_tracking_uri)
    notes += secret_notes(spec, env)
    return LaunchPlan(
        spec=spec,
        mode=protocol.FULL,
        processes=processes,
        timeout_seconds=spec.max_runtime_seconds,
        start_method=SPAWN,
        env=env,
        notes=tuple(notes),
        gpus=gpus,
    )


def secret_notes(spec: MLJobSpec, env: Mapping[str, str]) -> tuple[str, ...]:
    """Local runs take [ml-training.secrets]' variables from the shell, as they are: say which are missing."""
    missing = [s for s in spec.secrets if not env.get(s.name)]
    return tuple(
        f"{s.name} is not set in your shell (on the cluster it comes from the Secret {s.reference()}): "
        f"the run goes without it; `export {s.name}=...` first if the code needs it"
        for s in missing
    )


def visible_gpus() -> int:
    """GPUs a local full run may use, without importing torch (1.5 s) into the CLI."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return len([d for d in visible.split(",") if d.strip() and d.strip() != "-1"])
    smi = shutil.which("nvidia-smi")
    if not smi:
        return 0
    try:
        listing = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in listing.stdout.splitlines() if line.startswith("GPU ")) if listing.returncode == 0 else 0


def _user_env(
    spec: MLJobSpec, inherited: Mapping[str, str] | None = None, overlay: Overlay | None = None
) -> dict[str, str]:
    """This process's environment (or `inherited`) minus another launcher's layout and the plugin's own
    settings (but those meant for the training processes), plus the job's [ml-training.env], with the
    overlay first on the path."""
    env = {
        k: v
        for k, v in (os.environ if inherited is None else inherited).items()
        if k not in RESERVED_ENV
        and not k.startswith(_FOREIGN_PREFIXES)
        and (not k.startswith(ENV_PREFIX) or k in protocol.USER_SETTINGS)
    }
    env.update(spec.env_dict)
    if overlay is not None:
        env.update(overlay.env(env))
    return env
