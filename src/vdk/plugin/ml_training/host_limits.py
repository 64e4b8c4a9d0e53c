"""This machine's process limits, as a container may have them: the open files and processes a process of
`vdk` may have at most (its hard limits; the processes ones no higher than the kernel's `pid_max`, as podman
bounds its own), and whether this process could raise them (root with CAP_SYS_RESOURCE). Container engines ask
for more by default (podman as root: 1048576 open files): where the limits cannot be raised, a container asking
for more fails to start (`runc create failed: ... error setting rlimit`). Standard library only."""

from __future__ import annotations

import os
import resource
from dataclasses import dataclass
from pathlib import Path

CAP_SYS_RESOURCE = 24  # the capability that raises hard limits (linux/capability.h)
MAX_OPEN_FILES = 1 << 20  # no container needs more: podman's own default for root


@dataclass(frozen=True)
class HostLimits:
    open_files: int | None  # None: unlimited
    processes: int | None
    can_raise: bool  # this process may raise hard limits (so may an engine it starts as root)

    def ulimit_options(self) -> list[str]:
        """`--ulimit nofile=N:N --ulimit nproc=M:M` at this machine's limits (those that have one)."""
        out = []
        if self.open_files is not None:
            out += ["--ulimit", f"nofile={self.open_files}:{self.open_files}"]
        if self.processes is not None:
            out += ["--ulimit", f"nproc={self.processes}:{self.processes}"]
        return out


def host_limits() -> HostLimits:
    return HostLimits(_hard(resource.RLIMIT_NOFILE, MAX_OPEN_FILES), _processes(), _can_raise())


def _hard(which: int, cap: int | None = None) -> int | None:
    try:
        hard = resource.getrlimit(which)[1]
    except (OSError, ValueError):
        return None
    if hard == resource.RLIM_INFINITY:
        return cap
    return min(hard, cap) if cap is not None else hard


def _processes() -> int | None:
    limit = _hard(resource.RLIMIT_NPROC)
    try:
        pid_max = int(Path("/proc/sys/kernel/pid_max").read_text().strip())
    except (OSError, ValueError):
        return limit
    return pid_max if limit is None else min(limit, pid_max)


def _can_raise() -> bool:
    if os.geteuid() != 0:
        return False
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                return bool(int(line.split()[1], 16) >> CAP_SYS_RESOURCE & 1)
    except (OSError, ValueError, IndexError):
        return True  # no /proc (not Linux): nothing known against it
    return True
