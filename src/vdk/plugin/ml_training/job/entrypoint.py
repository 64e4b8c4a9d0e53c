"""The entrypoint: which script or module of the job directory a training process runs (`entrypoint`, else the
only top-level script with a `__main__` guard, else train.py), checked to exist, and whether it starts its own
workers (an mp.spawn call, source/spawn_scan.py), which the layout must allow.
"""

from __future__ import annotations

import re
from pathlib import Path

from vdk.plugin.ml_training.job.key_reader import KeyReader
from vdk.plugin.ml_training.job.model import Accelerators
from vdk.plugin.ml_training.job.model import Entrypoint
from vdk.plugin.ml_training.job.model import NodeRange
from vdk.plugin.ml_training.job.names import MODULE
from vdk.plugin.ml_training.source import spawn_scan

_MAIN_GUARD = re.compile(r"^if\s+(__name__\s*==\s*['\"]__main__['\"]|['\"]__main__['\"]\s*==\s*__name__)\s*:", re.M)


def read_entrypoint(keys: KeyReader, job_dir: Path) -> Entrypoint:
    """`entrypoint` checked to name a script or module of the job directory, else the one detected."""
    text = keys.raw("entrypoint")
    if text is None:
        return _detect_entrypoint(keys, job_dir)
    if text.startswith("-m"):
        module = text[2:].strip()
        if not MODULE.match(module):
            raise keys.error("entrypoint", f"{module!r} is not a module name", "write `entrypoint = -m package.module`")
        base = job_dir.joinpath(*module.split("."))
        if not (base.with_suffix(".py").is_file() or (base / "__main__.py").is_file()):
            raise keys.error(
                "entrypoint",
                f"module {module!r} is not in the job directory (no {base.relative_to(job_dir)}.py "
                f"or {base.relative_to(job_dir)}/__main__.py)",
                "put the module in the job directory or correct the name",
            )
        return Entrypoint(module, is_module=True)
    return Entrypoint(_script_path(keys, job_dir, text))


def _script_path(keys: KeyReader, job_dir: Path, text: str) -> str:
    candidate = (job_dir / text).resolve()
    if not candidate.is_relative_to(job_dir):
        raise keys.error("entrypoint", f"{text!r} is outside the job directory", "use a path inside the job directory")
    if candidate.is_dir():
        raise keys.error("entrypoint", f"{text!r} is a directory, not a script", _directory_fix(job_dir, candidate))
    if not candidate.is_file():
        scripts = _top_level_scripts(job_dir)
        hint = f" (scripts here: {', '.join(scripts)})" if scripts else ""
        raise keys.error(
            "entrypoint",
            f"{text!r} does not exist in {job_dir}{hint}",
            "correct the path, relative to the job directory",
        )
    return candidate.relative_to(job_dir).as_posix()


def _directory_fix(job_dir: Path, directory: Path) -> str:
    """What to write instead of a directory as the entrypoint: the package as a module, or a script in it."""
    relative = directory.relative_to(job_dir)
    module = ".".join(relative.parts)
    if (directory / "__main__.py").is_file() and MODULE.match(module):
        return f"run the package as a module: `entrypoint = -m {module}` (it has a __main__.py)"
    scripts = sorted(p.name for p in directory.glob("*.py") if p.is_file() and p.name != "__init__.py")
    if scripts:
        return f"name the script in it, e.g. `entrypoint = {(relative / scripts[0]).as_posix()}`"
    return "name a script, relative to the job directory, e.g. `entrypoint = train.py`"


def _top_level_scripts(job_dir: Path) -> list[str]:
    return sorted(p.name for p in job_dir.glob("*.py") if p.is_file())


def _detect_entrypoint(keys: KeyReader, job_dir: Path) -> Entrypoint:
    """The only top-level script with a `__main__` guard, else train.py."""
    guarded = [name for name in _top_level_scripts(job_dir) if _has_main_guard(job_dir / name)]
    if len(guarded) == 1:
        return Entrypoint(guarded[0])
    if (job_dir / "train.py").is_file():
        return Entrypoint("train.py")
    found = f"scripts with a __main__ guard: {', '.join(guarded)}" if guarded else "no script with a __main__ guard"
    raise keys.error(
        "entrypoint",
        f"cannot tell which script to run ({found}, and no train.py)",
        "set `entrypoint = your_script.py` in [ml-training]",
    )


def _has_main_guard(path: Path) -> bool:
    try:
        return bool(_MAIN_GUARD.search(path.read_text(encoding="utf-8", errors="replace")))
    except OSError:
        return False


def spawn_call(
    keys: KeyReader, job_dir: Path, entrypoint: Entrypoint, nodes: NodeRange, gpus: Accelerators
) -> spawn_scan.SpawnCall | None:
    """The entrypoint's mp.spawn call when it starts its own workers (spawn_scan), checked against the
    layout: such a script runs on one node, with one launcher process that spawns the workers."""
    spawn = spawn_scan.scan_file(entrypoint.file(job_dir))
    if spawn is None:
        return None
    call = spawn.describe(str(entrypoint))
    if nodes.max > 1:
        raise keys.error(
            "nodes",
            f"{call} starts its own worker processes on one machine (they meet on localhost), so with nodes = "
            f"{nodes} every node would train alone",
            "set `nodes = 1`, or let torchrun start the processes on every node: take the rank, local rank and "
            "world size from the RANK, LOCAL_RANK and WORLD_SIZE environment variables instead of mp.spawn",
        )
    if spawn.per_gpu and gpus.devices == 0:
        raise keys.error(
            "gpus_per_node",
            f"{call} starts one worker per GPU, and gpus_per_node = 0 gives it none",
            "set `gpus_per_node` to the GPUs the script should train on, e.g. `gpus_per_node = 8`",
        )
    procs = keys.raw("procs_per_node")
    if procs is not None and procs != "1":
        raise keys.error(
            "procs_per_node",
            f"{call} starts its own worker processes: each node runs one launcher process, which spawns them",
            "remove procs_per_node (or set `procs_per_node = 1`); the workers are one per GPU of gpus_per_node",
        )
    return spawn
