"""Out of memory: a rank killed by SIGKILL (most often the out-of-memory killer), a container OOMKilled at
its limit, and, in a log, CUDA running out of GPU memory or a process killed by signal 9."""

from __future__ import annotations

import re
import shlex

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import Fix
from vdk.plugin.ml_training.diagnosis.finding import container_ending
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import rank_failure
from vdk.plugin.ml_training.runtime import protocol
from vdk.plugin.ml_training.vocabulary.human_units import size_text

OOM_KILLED = "OOMKilled"

# In a cluster rank's log.
GPU_OUT_OF_MEMORY = Fix(
    r"CUDA out of memory|OutOfMemoryError",
    "the GPU ran out of memory: lower the per-device batch size, use gradient accumulation or mixed precision",
)
KILLED_IN_LOG = Fix(
    r"exitcode\s*:\s*-9|Signals\.SIGKILL|signal 9",
    "a training process was killed (SIGKILL): most often it ran out of host memory; raise `memory` in [ml-training]",
)


def out_of_memory(evidence: Evidence) -> Finding | None:
    if evidence.local is not None:
        return _local(evidence, evidence.local)
    ended = container_ending(evidence)
    if ended is None:
        return None
    blame, ending = ended
    if ending.reason == OOM_KILLED:
        limit = f" (memory = {blame.rank.memory_limit})" if blame.rank.memory_limit else ""
        return rank_failure(
            blame,
            f"was OOMKilled: it used more memory than its limit{limit}",
            "raise `memory` in [ml-training], or use less: a smaller batch size, fewer DataLoader workers",
        )
    if ending.signal == "SIGKILL":
        return rank_failure(
            blame,
            f"was killed (SIGKILL, exit code {ending.exit_code})",
            "usually the node ran low on memory or the pod was stopped by force; see the events",
        )
    return None


def _local(evidence: Evidence, local: LocalFacts) -> Finding | None:
    """Ended by SIGKILL (the out-of-memory killer's signal), or by a signal no one named (forked ranks)."""
    blame = evidence.blame
    ending = blame.ending if blame is not None else None
    if ending is None or not (ending.signal == "SIGKILL" or ending.unnamed_signal):
        return None
    again = local.again
    peaks = [r.peak_memory for r in evidence.ranks if r.peak_memory]
    machine = local.machine_memory
    had = ""
    if peaks:
        had = f": the ranks had up to {size_text(max(peaks))} each ({size_text(sum(peaks))} together"
        had += f"; this machine has {size_text(machine)})" if machine else ")"
    if local.mode != protocol.SMOKE:
        return local_failure(
            evidence,
            f"a rank was killed by SIGKILL, most likely by the out-of-memory killer{had}. Lower the batch size in "
            f"`args`, or run fewer processes (`procs_per_node`). Then {again}",
        )
    smaller = _smaller_batch(local.spec.arguments(smoke=True))
    example = f" (e.g. `smoke_args = {shlex.join(smaller)}`)" if smaller else ""
    ranks = f" (one rank instead of {local.ranks})" if local.ranks > 1 else ""
    return local_failure(
        evidence,
        f"a rank was killed by SIGKILL, most likely by the out-of-memory killer{had}. A batch sized for a GPU is "
        f"too big for this machine's CPU run; the smoke run checks the code, not the batch: set "
        f"`smoke_processes = 1` in [ml-training]{ranks}, and `smoke_args` with a smaller batch{example}, "
        f"arguments that smoke runs use instead of `args`. Then {again}",
    )


_BATCH = re.compile(r"^(--?[\w-]*batch[\w-]*)(?:=(\d+))?$", re.IGNORECASE)


def _smaller_batch(arguments: tuple[str, ...]) -> list[str] | None:
    """The arguments with a quarter of the batch size, when one is recognisable (`--batch-size 64`)."""
    out = list(arguments)
    for i, argument in enumerate(out):
        match = _BATCH.match(argument)
        if not match:
            continue
        if match.group(2) is not None:
            out[i] = f"{match.group(1)}={max(1, int(match.group(2)) // 4)}"
            return out
        if i + 1 < len(out) and out[i + 1].isdigit():
            out[i + 1] = str(max(1, int(out[i + 1]) // 4))
            return out
    return None
