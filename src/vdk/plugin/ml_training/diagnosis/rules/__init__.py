"""The rule list: every kind of failure the plugin explains, one module each, in the order they are asked.

The order is the precedence: the first failure rule that answers names the failure. A local run's reported
Python error is read first (needs a GPU, arguments refused, a missing package, a file the image leaves out, a
tensor on the wrong device, a gloo limit, else its traceback), and a node the idle policy stopped; then a smoke
run without a step, a stall, a container that could not start (the cluster's, or the local engine's), memory,
a stop, a crash, another signal, an exit code, an eviction, the time limit, torch missing from the image, and
last what is left to look at.

To add a diagnosis: write `rules/<kind>.py` (a function of the evidence, `diagnosis/evidence.py`, that
returns a Finding or None; a `Waiting` for a rank; a `Fix` for a line in a log), put it in the lists below
where it belongs, and describe it on the documentation's troubleshooting page.
"""

from __future__ import annotations

from vdk.plugin.ml_training.diagnosis.finding import ErrorNote
from vdk.plugin.ml_training.diagnosis.finding import FailureRule
from vdk.plugin.ml_training.diagnosis.finding import Fix
from vdk.plugin.ml_training.diagnosis.finding import RankWaitingRule
from vdk.plugin.ml_training.diagnosis.finding import RunWaitingRule
from vdk.plugin.ml_training.diagnosis.rules import arguments
from vdk.plugin.ml_training.diagnosis.rules import container_config
from vdk.plugin.ml_training.diagnosis.rules import data_step
from vdk.plugin.ml_training.diagnosis.rules import deadline
from vdk.plugin.ml_training.diagnosis.rules import device_mismatch
from vdk.plugin.ml_training.diagnosis.rules import emulation_gap
from vdk.plugin.ml_training.diagnosis.rules import engine_failure
from vdk.plugin.ml_training.diagnosis.rules import evicted
from vdk.plugin.ml_training.diagnosis.rules import excluded_file
from vdk.plugin.ml_training.diagnosis.rules import gloo_limit
from vdk.plugin.ml_training.diagnosis.rules import idle
from vdk.plugin.ml_training.diagnosis.rules import image_pull
from vdk.plugin.ml_training.diagnosis.rules import memory
from vdk.plugin.ml_training.diagnosis.rules import missing_package
from vdk.plugin.ml_training.diagnosis.rules import native_crash
from vdk.plugin.ml_training.diagnosis.rules import nccl
from vdk.plugin.ml_training.diagnosis.rules import needs_gpu
from vdk.plugin.ml_training.diagnosis.rules import other_signal
from vdk.plugin.ml_training.diagnosis.rules import python_error
from vdk.plugin.ml_training.diagnosis.rules import queue
from vdk.plugin.ml_training.diagnosis.rules import rendezvous
from vdk.plugin.ml_training.diagnosis.rules import scheduling
from vdk.plugin.ml_training.diagnosis.rules import shared_memory
from vdk.plugin.ml_training.diagnosis.rules import stall
from vdk.plugin.ml_training.diagnosis.rules import starting
from vdk.plugin.ml_training.diagnosis.rules import stopped
from vdk.plugin.ml_training.diagnosis.rules import unexplained
from vdk.plugin.ml_training.diagnosis.rules import untrained
from vdk.plugin.ml_training.diagnosis.rules import wrapped_keys

# Why a run failed (local or cluster): the first that answers.
FAILURE: tuple[FailureRule, ...] = (
    needs_gpu.needs_a_gpu,
    arguments.arguments_refused,
    missing_package.import_failed,
    excluded_file.file_left_out,
    device_mismatch.device_mismatch,
    gloo_limit.not_in_gloo,
    emulation_gap.cannot_emulate,
    wrapped_keys.wrapped_keys,
    idle.stopped_idle,
    python_error.error_reported,
    untrained.no_step_taken,
    stall.stalled,
    container_config.could_not_start,
    engine_failure.engine_failed,
    memory.out_of_memory,
    stopped.stopped,
    native_crash.crashed,
    other_signal.ended_by_signal,
    python_error.exited_with_error,
    evicted.evicted,
    deadline.out_of_time,
    missing_package.no_torch_in_image,
    unexplained.unexplained,
)

# Why a cluster run is not admitted to run (asked before its ranks).
ADMISSION: tuple[RunWaitingRule, ...] = (queue.queued,)

# Why one rank of a cluster run does not run (yet): the first that answers.
RANK_WAITING: tuple[RankWaitingRule, ...] = (
    scheduling.unschedulable,
    image_pull.cannot_pull,
    container_config.cannot_create,
    data_step.data_step_failed,
    starting.starting,
)

# Why a cluster run that is not queued has no pods at all.
NO_PODS: tuple[RunWaitingRule, ...] = (scheduling.no_pods_yet,)

# Well-known failures in the last lines of a failed rank's log: each that matches is a hint.
LOG_HINTS: tuple[Fix, ...] = (
    memory.GPU_OUT_OF_MEMORY,
    memory.KILLED_IN_LOG,
    shared_memory.SHM_TOO_SMALL,
    nccl.NCCL_FAILED,
    rendezvous.NOT_ALL_JOINED,
    missing_package.NOT_IN_IMAGE,
)

# What a Python error a local rank reported means beyond its fix (a note beside its traceback).
ERROR_NOTES: tuple[ErrorNote, ...] = (gloo_limit.gloo_note, emulation_gap.limit_note)
