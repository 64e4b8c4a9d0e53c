"""A construct the smoke run's CPU stand-ins cannot emulate (a CUDA graph, a CUDA random generator, FSDP1,
a DTensor operator whose CPU kernel has no sharding rule, a library that needs CUDA itself): a limit of the
smoke check, not a bug of the job. The finding names the construct and the narrowest switch: keep that one
construct out of smoke runs (they set VDK_ML_TRAINING_MODE=smoke), not the whole check nor its device
tracking. Gloo's own limits are gloo_limit.py's."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error
from vdk.plugin.ml_training.runtime import protocol

# The narrowest switch: code that runs everywhere but in smoke runs.
SMOKE_GUARD = f'`if os.environ.get("{protocol.MODE}") != "smoke":`'
_FRAME = re.compile(r'File "([^"]+)", line \d+')
_PACKAGE = re.compile(r"[/\\](?:site|dist)-packages[/\\]([A-Za-z_][A-Za-z0-9_]*)")
_CPU_KERNEL = re.compile(r"_for_cpu|mkldnn|_cpu\b|_cpu\.")


@dataclass(frozen=True)
class Gap:
    """A message (and, if given, a frame of the traceback) that says the code met a gap of the emulation."""

    message: re.Pattern
    construct: str  # what the code used; {0} is the message's first group
    switch: str  # the narrowest switch, after "Narrowest switch: "
    frame: re.Pattern | None = None  # a frame the traceback must show (whose code raised it)


def _gap(message: str, construct: str, switch: str, frame: str | None = None) -> Gap:
    return Gap(re.compile(message), construct, switch, re.compile(frame) if frame else None)


GAPS: tuple[Gap, ...] = (
    _gap(
        r"Operator (aten\.\w+)(?:\.\w+)? does not have a sharding strategy registered",
        "the DTensor operator {0} (the CPU kernel standing in for a CUDA one has no DTensor sharding rule)",
        f"compute it on local shards in smoke runs (`.to_local()` under {SMOKE_GUARD} … `else:`)",
    ),
    _gap(
        r"dummy base class CUDAGraph",
        "CUDA graphs (torch.cuda.CUDAGraph, torch.cuda.graph, make_graphed_callables)",
        f"run the step eagerly in smoke runs: put the capture and the replay under {SMOKE_GUARD}, "
        "and call the step itself otherwise",
    ),
    _gap(
        r"Cannot get CUDA generator",
        'a CUDA random number generator (torch.Generator(device="cuda"))',
        f'make it on the CPU in smoke runs: `torch.Generator(device="cpu")` unless {SMOKE_GUARD}',
    ),
    _gap(
        r"unknown parameter type|Torch not compiled with CUDA enabled",
        "FSDP (the first version, FullyShardedDataParallel)",
        f"wrap the model with FSDP only under {SMOKE_GUARD} (DDP or no wrapper otherwise); fully_shard "
        "(FSDP2), which the smoke check runs, is the way out of this gap",
        frame=r"torch[/\\]distributed[/\\]fsdp[/\\](?:fully_sharded_data_parallel|_)",
    ),
    _gap(
        r"pin_memory=True requires a CUDA|no pinned memory allocator",
        "pinned host memory (pin_memory=True outside a DataLoader)",
        f"pass `pin_memory=True` only under {SMOKE_GUARD}",
    ),
    _gap(
        r"module 'torch\._C' has no attribute '(_(?:cuda|nccl|cudnn)\w*)'",
        "a CUDA-only part of torch (torch._C.{0})",
        f"keep that call out of smoke runs: {SMOKE_GUARD}",
    ),
    _gap(
        r"Torch not compiled with CUDA enabled|Found no NVIDIA driver|No CUDA runtime is found|CUDA_HOME|"
        r"libcudart|CUDA driver (?:initialization|version)|Cannot access accelerator device when none is available",
        "{library}, which needs CUDA itself",
        f"keep it out of smoke runs: {SMOKE_GUARD} around its use (a plain PyTorch path otherwise)",
    ),
)


def emulation_gap(error: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(what cannot be emulated, said as a limit of the smoke check; the narrowest switch), or None."""
    found = construct_of(error)
    if found is None:
        return None
    construct, switch = found
    return f"{construct} cannot run on the smoke run's virtual GPUs (CPU kernels, gloo for NCCL): {SMOKE_LIMIT}", switch


SMOKE_LIMIT = "this is a limit of the smoke check, not a bug in your code"
# A full run on CPU that asked for the smoke run's stand-ins (VDK_ML_TRAINING_ADAPT_TO_CPU): their limit, not the
# smoke check's.
ADAPTED_LIMIT = (
    f"the virtual GPUs that stand in for CUDA in this full run on CPU ({protocol.ADAPT_TO_CPU}=1; CPU kernels, gloo "
    "for NCCL): a limit of those stand-ins, not a bug in your code"
)


def construct_of(error: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(what the code used that the virtual GPUs cannot emulate, the narrowest switch), or None."""
    message = (error or {}).get("message", "")
    traceback = (error or {}).get("traceback", "")
    for gap in GAPS:
        match = gap.message.search(message)
        if match is None or (gap.frame is not None and not gap.frame.search(traceback)):
            continue
        if gap is GAPS[0] and not _CPU_KERNEL.search(match.group(1)):
            continue  # an operator DTensor lacks on GPUs too: the code's, not the smoke check's
        return gap.construct.format(*match.groups(), library=_library(traceback)), gap.switch
    return None


def _library(traceback: str) -> str:
    """The innermost library of the traceback other than torch (flash_attn, bitsandbytes, deepspeed, ...),
    else the part of torch that raised."""
    frames = _FRAME.findall(traceback)
    for path in reversed(frames):
        package = _PACKAGE.search(path)
        if package and package.group(1) not in ("torch", "vdk"):
            return package.group(1)
    for path in reversed(frames):
        torch_part = re.search(r"[/\\](torch(?:[/\\]\w+)*)\.py$", path)
        if torch_part:
            return re.sub(r"[/\\]", ".", torch_part.group(1)).removesuffix(".__init__")
    return "a CUDA API the virtual GPUs do not stand in for"


def limit_note(error: Mapping[str, Any] | None, local: LocalFacts) -> str | None:
    """The gap, as a note beside the traceback, said as the limit of what the run used: the smoke run's virtual
    GPUs, or a full run's on CPU (VDK_ML_TRAINING_ADAPT_TO_CPU); none for a full run that used none (its code met
    CUDA itself: the needs_gpu rule says what to do)."""
    if not local.stand_ins:
        return None
    if local.mode == protocol.SMOKE:
        gap = emulation_gap(error)
        return gap[0] if gap is not None else None
    found = construct_of(error)
    return f"{found[0]} cannot run on {ADAPTED_LIMIT}" if found is not None else None


def cannot_emulate(evidence: Evidence) -> Finding | None:
    reported = reported_error(evidence)
    if reported is None or reported[0].mode != protocol.SMOKE:
        return None
    gap = emulation_gap(reported[2])
    if gap is None:
        return None
    limit, switch = gap
    return local_failure(
        evidence,
        f"{limit}. Narrowest switch: {switch} (smoke runs set {protocol.MODE}=smoke; the cluster run is "
        f"unchanged). `vdk deploy --skip-smoke` skips the whole check instead. Then {reported[0].again}",
    )
