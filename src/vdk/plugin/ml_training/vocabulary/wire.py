"""The words of what crosses between vdk and a run's processes, written once for both sides.

A run's processes speak to vdk in lines of their output that start with `[vdk-ml-training] <kind>`: rank 0's
progress, a stalled rank's stacks, a node's GPU figures, the data step's pins... Each kind is below, with the one
module that writes lines of it and reads them back (its `format`/`parse` pair); a module that needs another's
lines imports that module's reader. Failures are said as a problem and what to do about it (`with_fix`,
`split_fix`), and what a container leaves for `vdk show` goes into its termination message.

Standard library only: runtime/ and datafetch/ import it in the pods.
"""

from __future__ import annotations

PROJECT = "vdk-ml-training"  # the project's name, wherever a name says who made something
PREFIX = "[vdk-ml-training]"  # how every line the plugin's processes print for vdk (and people) starts: [PROJECT]

# The kinds of line: the word after PREFIX, and the module that writes and reads that kind.
PROGRESS = "progress"  # rank 0's progress: runtime/progress_lines.py
STALLED = "stalled:"  # a rank the stall watchdog stopped: runtime/watchdog.py
STACK = "stack"  # a thread's stack under a stall or idle line: runtime/watchdog.py
IDLE = "idle:"  # a node the idle policy stopped: runtime/idle_policy.py
GPU = "gpu"  # a node's GPU figures: runtime/gpu_lines.py
OUTPUTS = "outputs"  # what the run's output directory holds: runtime/output_workdir.py
OUTPUTS_EXPORT = "outputs-export"  # a run's outputs sent through a log: runtime/outputs_stream.py
PARAMETERS = "parameters"  # a rank's parameter checksum: runtime/checksum.py
METRIC = "metric"  # a sweep trial's metric: runtime/sweep_protocol.py
METRIC_NAMES = "metric-names"  # the metrics a trial's script showed: runtime/metrics.py
STUDY = "study"  # a sweep's study snapshot: runtime/sweep_protocol.py
SWEEP_STOPPED = "sweep stopped"  # why a sweep stopped early: runtime/sweep_protocol.py
TRIAL = "trial"  # what a sweep's trial pod does, for people: runtime/sweep_trial.py
SLOT = "slot"  # a trial pod's slot, for people: runtime/sweep_trial.py
ADAPTED = "adapted for CPU:"  # what the CPU adaptations changed, for people: runtime/bootstrap.py
DATA = "data"  # the data step's steps, for people: datafetch/fetch_step.py
DATA_FAILED = "data failed:"  # the data step's failure: datafetch/fetch_step.py
DATA_MANIFEST = "data manifest"  # what a claim holds: datafetch/data_pins.py
KUBEFLOW = "kubeflow:"  # rank 0's posts into a TrainJob's Kubeflow status, for people: runtime/kubeflow_status.py
RESUME = "resume:"  # a framework resumed from a checkpoint (and a stranger's left alone), for people: runtime/resume.py
STOP = "stop:"  # a rank told to stop, and the checkpoint it wrote on the way out, for people: runtime/resume.py
MLFLOW = "mlflow:"  # rank 0's MLflow run of the training run, for people: runtime/mlflow_runs.py
WARNING = "warning:"  # something the plugin's processes could not do, the run goes on
ERROR = "error:"  # something the plugin's processes could not do, the process ends


def mark(kind: str) -> str:
    """How every line of `kind` starts: `[vdk-ml-training] progress`."""
    return f"{PREFIX} {kind}"


def line(kind: str, text: str) -> str:
    """A line of `kind`: `[vdk-ml-training] progress step=1 ...`."""
    return f"{mark(kind)} {text}"


def fields(text: str, kind: str) -> dict[str, str] | None:
    """The `key=value` words of the line of `kind` in `text` (anywhere in it: after a log prefix too), e.g.
    {'step': '12', 'loss': '0.5'} of `[vdk-ml-training] progress step=12 loss=0.5`; a word without `=` is passed
    over. None when `text` holds no line of `kind` (its mark and a space: `metric-names` is no `metric`)."""
    start = mark(kind) + " "
    at = text.find(start)
    if at < 0:
        return None
    return dict(word.split("=", 1) for word in text[at + len(start) :].split() if "=" in word)


def warning(text: str) -> str:
    return line(WARNING, text)


def error(text: str) -> str:
    return line(ERROR, text)


def is_ours(text: str) -> bool:
    """Whether a line of output is one of the plugin's (not the user's code's)."""
    return text.startswith(PREFIX)


# A failure as it is reported: what is wrong, then what to do (errors.MLTrainingError, datafetch's SourceError).
FIX = "\nFix: "


def with_fix(problem: str, fix: str | None) -> str:
    return f"{problem}{FIX}{fix}" if fix else problem


def split_fix(text: str) -> tuple[str, str]:
    """(problem, fix) of a text `with_fix` wrote; the fix is "" when it has none."""
    problem, _, fix = text.partition(FIX)
    return problem, fix


# The file whose content the kubelet copies into the pod's status when a container ends (its default
# terminationMessagePath), of which it keeps at most this many bytes: `vdk show` reads it without a log request.
TERMINATION_LOG = "/dev/termination-log"
TERMINATION_MAX_BYTES = 4096

# Every environment variable the plugin defines starts with this (each is named once, where it is read).
ENV_PREFIX = "VDK_ML_TRAINING_"


def setting_variable(key: str) -> str:
    """VDK's rule for the environment variable of a configuration key: `ml_training_registry` ->
    `VDK_ML_TRAINING_REGISTRY`."""
    return f"VDK_{key.upper()}"
