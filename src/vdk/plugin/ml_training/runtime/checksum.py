"""Parameter checksums, to see that data-parallel replicas ended identical (their gradients were really
averaged across processes and nodes). With `VDK_ML_TRAINING_PARAMETER_CHECKSUM=1`, every rank prints
one line when its script ends:

    [vdk-ml-training] parameters rank=2 steps=32 sha256=5be1...c0 tensors=4

a SHA-256 of the parameters its optimizers stepped (in the order they first stepped, each tensor's
dtype, shape and bytes), taken after the last step. Under DDP (and HF Trainer / Accelerate over DDP)
every rank prints the same digest; sharded training (FSDP, tensor parallel) prints each rank's shard.
`parse_checksums` reads the lines back. Standard library at import; torch only when a digest is taken.
"""

from __future__ import annotations

import ctypes
import hashlib
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from vdk.plugin.ml_training.vocabulary import wire

MARK = wire.mark(wire.PARAMETERS)
_LINE = re.compile(re.escape(MARK) + r" rank=(\d+) steps=(\d+) sha256=([0-9a-f]{64}) tensors=(\d+)")


@dataclass(frozen=True)
class Checksum:
    rank: int
    steps: int
    sha256: str
    tensors: int


def format_line(checksum: Checksum) -> str:
    return f"{MARK} rank={checksum.rank} steps={checksum.steps} sha256={checksum.sha256} tensors={checksum.tensors}"


def parse_checksums(lines: Iterable[str]) -> dict[int, Checksum]:
    """rank -> its checksum line, from any log (other output in between is skipped)."""
    found: dict[int, Checksum] = {}
    for line in lines:
        for match in _LINE.finditer(line):
            rank, steps, sha256, tensors = match.groups()
            found[int(rank)] = Checksum(int(rank), int(steps), sha256, int(tensors))
    return found


class ParameterChecksum:
    """Keeps the parameters of every optimizer that stepped (as of its last step), for `take()`.

    Holding them keeps a model alive after the script dropped it, until the process ends: that is
    when the digest is taken."""

    def __init__(self) -> None:
        self._stepped: dict[int, tuple[Any, ...]] = {}  # id(optimizer) -> its parameters, first stepped first
        self.steps = 0

    def attach(self, counter) -> ParameterChecksum:
        counter.listeners.append(self.on_step)
        return self

    def on_step(self, counter, optimizer) -> None:
        """A StepCounter listener."""
        self.steps = counter.steps
        self._stepped[id(optimizer)] = tuple(p for group in optimizer.param_groups for p in group["params"])

    def take(self, rank: int) -> Checksum | None:
        """The digest of the kept parameters; None if no optimizer stepped."""
        if not self._stepped:
            return None
        digest = hashlib.sha256()
        seen: set[int] = set()
        count = 0
        for params in self._stepped.values():
            for param in params:
                if id(param) in seen:
                    continue
                seen.add(id(param))
                count += 1
                _add_tensor(digest, param)
        return Checksum(rank, self.steps, digest.hexdigest(), count)


def _add_tensor(digest, tensor) -> None:
    to_local = getattr(tensor, "to_local", None)  # a DTensor: this rank's shard
    local = (to_local() if callable(to_local) else tensor).detach().cpu().contiguous()
    digest.update(f"{local.dtype}{tuple(local.shape)};".encode())
    size = local.numel() * local.element_size()
    if size:
        digest.update(ctypes.string_at(local.data_ptr(), size))
