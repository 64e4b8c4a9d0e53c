"""What the local launcher and the training processes agree on: environment variables and the
per-rank result files. Standard library only; imported on both sides."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from typing import TypeVar

# Set by the local launcher; absent in job images, where the bootstrap only runs the user's code.
MODE = "VDK_ML_TRAINING_MODE"  # "smoke" (CPU shims + step limit) or "full"
RUN_DIR = "VDK_ML_TRAINING_RUN_DIR"  # where rank-<N>.json / rank-<N>.log are written
SMOKE_STEPS = "VDK_ML_TRAINING_SMOKE_STEPS"
SMOKE_GPUS = "VDK_ML_TRAINING_SMOKE_GPUS"  # virtual GPUs of the node in a smoke run
DEVICE_TRACKING = "VDK_ML_TRAINING_DEVICE_TRACKING"  # "0": tensors on virtual GPUs are not tracked
# Set when the script starts its own workers (mp.spawn): the one torchrun process is their launcher.
SPAWNED_WORKERS = "VDK_ML_TRAINING_SPAWNED_WORKERS"
LAUNCHER = "launcher"  # the launcher's files: rank-launcher.json, .log, .stack; its workers are the ranks
CONSOLE_STDERR = "VDK_ML_TRAINING_CONSOLE_STDERR"  # path rank 0 writes its stderr to (a tty or a FIFO)
# Set by a launcher process that reports progress before it spawns its workers: worker 0 reports instead.
SPAWNED_PROGRESS = "VDK_ML_TRAINING_SPAWNED_PROGRESS"
# The job directory the ranks' working directory was made from (local/workdir.py): nothing writes into it.
JOB_DIR = "VDK_ML_TRAINING_JOB_DIR"
# The directories of the job's own code besides the working directory (os.pathsep-separated): its loops are marked
# (runtime/training_loops.py), in the rank and in the processes it spawns.
CODE_DIRS = "VDK_ML_TRAINING_CODE_DIRS"
EPOCH_END = "VDK_ML_TRAINING_EPOCH_END"  # "0": a smoke run stops after smoke_steps steps, epochs are not cut
# Where the run's outputs go; the bootstrap makes it the working directory (runtime/output_workdir.py). Set for
# cluster runs with an output claim (k8s/pod_template.py) and for local runs (their working directory).
OUTPUT_DIR = "VDK_ML_TRAINING_OUTPUT_DIR"
# Automatic resume and the checkpoint on the way out (runtime/resume.py): "auto" or "off" (absent: off). Set by the
# renderers (k8s/pod_template.py) and the local launcher from the job's `resume` key.
RESUME = "VDK_ML_TRAINING_RESUME"
# The run whose checkpoints these are (a cluster run's name; a local run's directory): what a rank resumes from must
# have been written by it, or by the run it continues (RESUME_FROM, empty for a new run), never by a stranger.
RUN_NAME = "VDK_ML_TRAINING_RUN_NAME"
RESUME_FROM = "VDK_ML_TRAINING_RESUME_FROM"
# The most starts a cluster run's rank 0 makes in its output directory (1 + max_restarts + max_disruptions): the cap
# on restarts the cluster does not count (disruptions); set by k8s/pod_template.py, counted by runtime/lineage.py.
MAX_STARTS = "VDK_ML_TRAINING_MAX_STARTS"
# Where the run this one continues (RESUME_FROM) left its outputs, mounted read-only: copied into this run's output
# directory before its code runs (runtime/earlier_outputs.py); set by `vdk execute --start --from`
# (k8s/runs/continuation.py).
CONTINUES_DIR = "VDK_ML_TRAINING_CONTINUES_DIR"
# The smoke run's resume check (ops/resume_check.py): "stop" in its first start (the planned end is a stop, as a
# preemption's SIGTERM), "resume" in its second; FIRST_START_DIR: the second start's way to the first one's files.
SMOKE_RESUME = "VDK_ML_TRAINING_SMOKE_RESUME"
SMOKE_STOP = "stop"
SMOKE_RESTART = "resume"
FIRST_START_DIR = "VDK_ML_TRAINING_FIRST_START_DIR"

# Set by the user ([ml-training.env], or the shell for a local run); read by rank 0 of cluster and
# full local runs.
PROGRESS_SECONDS = "VDK_ML_TRAINING_PROGRESS_SECONDS"  # between progress lines; 0 = none
TOTAL_STEPS = "VDK_ML_TRAINING_TOTAL_STEPS"  # optimizer steps of the whole run, when no Trainer tells
# Read by every rank (runtime/checksum.py): print a digest of the parameters when the script ends.
PARAMETER_CHECKSUM = "VDK_ML_TRAINING_PARAMETER_CHECKSUM"
# Read by every rank of a cluster or full local run: the smoke run's CPU adaptations, without its step
# limit, so that GPU code rehearses on CPU-only nodes.
ADAPT_TO_CPU = "VDK_ML_TRAINING_ADAPT_TO_CPU"
# Read by every rank of a TrainJob whose Kubeflow Trainer injects its status endpoint: "0" leaves the TrainJob's
# status to transformers' Kubeflow callback instead of rank 0's posts (runtime/kubeflow_status.py).
KUBEFLOW_STATUS = "VDK_ML_TRAINING_KUBEFLOW_STATUS"
# Read by rank 0 of a cluster or full local run (runtime/series.py): seconds between two points of the run's series
# (TensorBoard's event files, an MLflow run); 0 = none. And "0" turns the event files off (runtime/board_events.py).
SERIES_SECONDS = "VDK_ML_TRAINING_SERIES_SECONDS"
TENSORBOARD = "VDK_ML_TRAINING_TENSORBOARD"
USER_SETTINGS = (PROGRESS_SECONDS, TOTAL_STEPS, PARAMETER_CHECKSUM, ADAPT_TO_CPU, KUBEFLOW_STATUS, SERIES_SECONDS,
                 TENSORBOARD)  # fmt: skip
# Set by the local launcher and the pods' template: the run's facts as JSON (runtime/series.py writes and reads
# them); set for a sweep's trials: the MLflow run of their sweep (runtime/mlflow_runs.py).
RUN_FACTS = "VDK_ML_TRAINING_RUN_FACTS"
MLFLOW_PARENT = "VDK_ML_TRAINING_MLFLOW_PARENT"
SWITCHES = (PARAMETER_CHECKSUM, ADAPT_TO_CPU, KUBEFLOW_STATUS, TENSORBOARD)  # 1/true/yes/on, or 0/false/no/off
SWITCH_VALUES = {"1": True, "true": True, "yes": True, "on": True}
SWITCH_VALUES.update({"0": False, "false": False, "no": False, "off": False})


def switched_on(name: str, env: dict[str, str] | None = None) -> bool:
    """Whether a switch among SWITCHES is on in `env` (default: this process's environment)."""
    value = (os.environ if env is None else env).get(name, "")
    return SWITCH_VALUES.get(value.strip().lower(), False)


SMOKE = "smoke"
FULL = "full"

# Rank status in its result file.
RUNNING = "running"  # started; a final status replaces it unless the process dies abruptly
STOPPED = "stopped"  # smoke run: stopped by the launcher's step limit, as intended
FINISHED = "finished"  # the script ended by itself
FAILED = "failed"  # the script raised (or exited non-zero)
STALLED = "stalled"  # full run: the stall watchdog ended the rank (no optimizer step for stall_timeout)

# Observed in a smoke run (a rank's "observed" list): the script started no training process.
SPAWNED_NOTHING = "torch.multiprocessing.spawn(nprocs=0)"


_R = TypeVar("_R", bound="_Reached")


@dataclass(frozen=True)
class _Reached:
    """A point of a smoke rank's script, reached or not: whether, how, and what ran after it. One record shape for
    the end of an epoch and the end of training; a subclass's further fields are texts."""

    reached: bool
    how: str = ""
    then: tuple[str, ...] = ()  # what ran after it: "evaluation (2 batches)", "1 save"

    def to_record(self) -> dict[str, Any]:
        record = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        record["then"] = list(self.then)
        return record

    @classmethod
    def from_record(cls: type[_R], record: Any) -> _R | None:
        if not isinstance(record, dict) or not isinstance(record.get("reached"), bool):
            return None
        then = record.get("then") or []
        texts = {
            f.name: str(record.get(f.name) or "") for f in dataclasses.fields(cls) if f.name not in ("reached", "then")
        }
        return cls(reached=record["reached"], then=tuple(str(x) for x in then if isinstance(x, str)), **texts)


@dataclass(frozen=True)
class EpochEnd(_Reached):
    """Whether a smoke rank reached the end of an epoch (field "epoch_end" of its result file). `how`: how, when
    not by the end of a DataLoader pass ("the Hugging Face Trainer ...")."""

    why_not: str = ""  # why not, when known


@dataclass(frozen=True)
class TrainingEnd(_Reached):
    """Whether the code after a smoke rank's training loop ran (field "training_end" of its result file). `how`:
    how training ended ("the script left its training loop (train.py:42) after its first epoch")."""

    not_run: str = ""  # why the code after it did not run, and what covers it
    note: str = ""  # steps past smoke_steps, and why (a sweep's metric not reported yet)


def result_path(run_dir: Path | str, rank: int | str) -> Path:
    return Path(run_dir) / f"rank-{rank}.json"


def log_path(run_dir: Path | str, rank: int | str) -> Path:
    return Path(run_dir) / f"rank-{rank}.log"


def stack_path(run_dir: Path | str, rank: int | str) -> Path:
    """Python stacks dumped by faulthandler on a crash or when the rank is terminated."""
    return Path(run_dir) / f"rank-{rank}.stack"


# The first lines of a stack file: which of the threads that faulthandler lists ran the rank's own code, and the
# outermost frame of that thread (where a whole dump of it ends: a rank ended in the middle of its dump is told).
_MAIN_THREAD = "vdk-ml-training main thread "
_MAIN_ENTRY = "vdk-ml-training main thread entry: "


def stack_file_header() -> str:
    """Written by the rank's main thread before faulthandler may write anything: its id as faulthandler
    prints it (`Thread 0x00007f...`) and its outermost frame (`File "<frozen runpy>" in _run_module_as_main`)."""
    import threading

    frame = sys._getframe()
    while frame.f_back is not None:
        frame = frame.f_back
    entry = f'File "{frame.f_code.co_filename}" in {frame.f_code.co_name}'
    return f"{_MAIN_THREAD}0x{threading.get_ident():016x}\n{_MAIN_ENTRY}{entry}\n"


def main_thread_of(dump: str) -> str | None:
    """The id (`0x00007f...`) of the rank's main thread, from a stack file's header; None without one."""
    for line in dump.splitlines():
        if line.startswith(_MAIN_THREAD) and not line.startswith(_MAIN_ENTRY):
            return line[len(_MAIN_THREAD) :].strip()
    return None


def main_entry_of(dump: str) -> tuple[str, str] | None:
    """(file, function) of the rank's main thread's outermost frame, from a stack file's header; None without."""
    for line in dump.splitlines():
        if line.startswith(_MAIN_ENTRY):
            file, _, function = line[len(_MAIN_ENTRY) :].rpartition('" in ')
            return file.removeprefix('File "'), function.strip()
    return None


def has_dump(stack_file_text: str) -> bool:
    """Whether faulthandler wrote into a stack file (beyond the header every rank writes when it starts)."""
    return any(line.strip() and not line.startswith(_MAIN_THREAD) for line in stack_file_text.splitlines())


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    """Readers never see a half-written file: write a sibling, then rename over."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=path.name, suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def read_launcher(run_dir: Path | str) -> dict[str, Any] | None:
    """The launcher process's record, in a run whose script spawns its workers."""
    try:
        return json.loads(result_path(run_dir, LAUNCHER).read_text(encoding="utf-8"))
    except (ValueError, OSError):
        return None


def read_results(run_dir: Path | str) -> dict[int, dict[str, Any]]:
    """rank -> its result record, for every readable rank-<N>.json in the run directory."""
    out: dict[int, dict[str, Any]] = {}
    for path in Path(run_dir).glob("rank-*.json"):
        try:
            rank = int(path.stem.split("-", 1)[1])
            out[rank] = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, OSError):
            continue
    return out
