"""The container engine could not start the job's container (`vdk run --container`): no rank ran, and the engine
said why in torchrun's place (`Error: runc: runc create failed: ... error setting rlimit type 7`, `docker: Error
response from daemon: ...`). Named as the engine's failure, with the fix for what it says, not as torchrun's."""

from __future__ import annotations

import re
from pathlib import Path

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import log_tail
from vdk.plugin.ml_training.diagnosis.finding import FAILED
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import Fix
from vdk.plugin.ml_training.diagnosis.finding import fix_for
from vdk.plugin.ml_training.host_limits import host_limits
from vdk.plugin.ml_training.job.keys import variable

ENGINE = variable("container_engine")
OPTIONS = variable("container_run_options")
# What podman and Docker print when they cannot create or start a container (not what the container prints).
_ENGINE_ERROR = re.compile(
    r"^(Error: .*|docker: Error response from daemon: .*|Error response from daemon: .*|"
    r".*\b(OCI runtime (create )?failed|runc create failed|crun: ).*)$"
)


def _limits_fix() -> str:
    options = " ".join(host_limits().ulimit_options()) or "--ulimit nofile=1024:1024 --ulimit nproc=1024:1024"
    return (
        "the engine asks for more open files or processes than this machine lets it have (a container, a VM or a "
        f"rootless user cannot raise its limits): give the container this machine's limits, {OPTIONS}='{options}'"
    )


# What the engine's message means, and what to set (the first that matches).
_FIXES: tuple[Fix, ...] = (
    Fix(r"rlimit|RLIMIT|ulimit", "LIMITS"),
    Fix(r"cgroup", f"the engine cannot manage cgroups here: {ENGINE}='podman --cgroup-manager cgroupfs', or "
        f"{OPTIONS}='--cgroups=disabled' (podman)"),
    Fix(r"netavark|CNI|slirp4netns|pasta|network|iptables",
        f"the engine cannot set up the container's network here: {OPTIONS}='--network host'"),
    Fix(r"overlay|fuse-overlayfs|graph driver|storage driver|mount.*(not permitted|permission denied)",
        f"the engine's storage driver does not work here: {ENGINE}='podman --storage-driver vfs'"),
    Fix(r"docker\.sock.*permission denied|permission denied.*docker\.sock",
        f"your user may not use the Docker daemon: add it to the `docker` group (then log in again), or use "
        f"podman ({ENGINE}=podman)"),
    Fix(r"no space left on device", "the engine's storage is full: `podman system prune` / `docker system prune`"),
    Fix(r"Cannot connect to the Docker daemon|is the docker daemon running",
        f"start the Docker daemon, or use podman ({ENGINE}=podman)"),
)  # fmt: skip


def engine_failed(evidence: Evidence) -> Finding | None:
    local = evidence.local
    if local is None or not local.in_image or evidence.blame is not None or local.agent_log is None:
        return None
    message = engine_message(local.agent_log)
    if message is None:
        return None
    engine = local.engine or "the container engine"
    fix = fix_for(message, _FIXES)
    if fix == "LIMITS":
        fix = _limits_fix()
    fix = fix or (
        f"see {engine}'s message; {ENGINE} sets the engine's command and global options, {OPTIONS} the options "
        "of its `run`"
    )
    return Finding(
        FAILED,
        f"{engine} could not start the job's container (no rank ran): {message}",
        f"{fix}. Then {local.again}",
    )


def engine_message(log: Path) -> str | None:
    """The engine's own error in the log of a container run (the engine's client writes there), if any."""
    said = [line.strip() for line in log_tail(log).splitlines() if _ENGINE_ERROR.match(line.strip())]
    return said[-1] if said else None
