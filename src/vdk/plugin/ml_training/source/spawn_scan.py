"""Whether a training script starts its own worker processes with `torch.multiprocessing.spawn`, as
PyTorch's single-node DDP tutorials do (`mp.spawn(main, nprocs=torch.cuda.device_count())`), read from
its source before anything runs.

Such a script is run as it intends: one launcher process per node, which spawns one worker per GPU.
A script that also reads torchrun's rank variables (RANK, LOCAL_RANK, WORLD_SIZE) runs under torchrun
as it is: it knows how to be started either way.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

_SPAWNERS = ("spawn", "start_processes")
_TORCHRUN_VARIABLES = frozenset({"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE"})
_DEVICE_COUNTS = ("device_count",)


@dataclass(frozen=True)
class SpawnCall:
    """Where the script calls torch.multiprocessing.spawn, and whether it asks for one process per GPU."""

    line: int
    per_gpu: bool  # nprocs comes from torch.cuda/torch.accelerator.device_count()

    def describe(self, filename: str) -> str:
        nprocs = "nprocs=torch.cuda.device_count()" if self.per_gpu else "nprocs=..."
        return f"{filename}:{self.line} mp.spawn({nprocs})"


def scan_file(path: Path) -> SpawnCall | None:
    try:
        source = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    return scan(source)


def scan(source: str) -> SpawnCall | None:
    """The script's mp.spawn call, when it starts its own workers that way; None otherwise (or when the
    source does not parse: running it will say why)."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return None
    modules, functions = _spawn_names(tree)
    if not modules and not functions:
        return None
    if _reads_torchrun_variables(tree):
        return None
    counted = _names_assigned_from_device_count(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and _is_spawn(node.func, modules, functions):
            return SpawnCall(node.lineno, _nprocs_per_gpu(node, counted))
    return None


def _spawn_names(tree: ast.AST) -> tuple[set[str], set[str]]:
    """Names bound to torch.multiprocessing (`import torch.multiprocessing as mp`) and to its spawn
    functions (`from torch.multiprocessing import spawn`)."""
    modules: set[str] = set()
    functions: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "torch.multiprocessing":
                    modules.add(alias.asname or "torch.multiprocessing")
                elif alias.name == "torch" and alias.asname is None:
                    modules.add("torch.multiprocessing")
        elif isinstance(node, ast.ImportFrom) and node.module in ("torch", "torch.multiprocessing"):
            for alias in node.names:
                if node.module == "torch" and alias.name == "multiprocessing":
                    modules.add(alias.asname or "multiprocessing")
                elif node.module == "torch.multiprocessing" and alias.name in _SPAWNERS:
                    functions.add(alias.asname or alias.name)
    return modules, functions


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _is_spawn(func: ast.AST, modules: set[str], functions: set[str]) -> bool:
    name = _dotted(func)
    if name is None:
        return False
    if name in functions:
        return True
    owner, _, attribute = name.rpartition(".")
    return attribute in _SPAWNERS and owner in modules


def _reads_torchrun_variables(tree: ast.AST) -> bool:
    """os.environ["LOCAL_RANK"], os.environ.get("RANK"), os.getenv("WORLD_SIZE"), "RANK" in os.environ."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript) and isinstance(node.ctx, ast.Load):
            if _constant(node.slice) in _TORCHRUN_VARIABLES and (_dotted(node.value) or "").endswith("environ"):
                return True
        elif isinstance(node, ast.Call) and node.args:
            name = _dotted(node.func) or ""
            if name.endswith(("environ.get", "getenv")) and _constant(node.args[0]) in _TORCHRUN_VARIABLES:
                return True
        elif isinstance(node, ast.Compare) and any(isinstance(op, ast.In) for op in node.ops):
            if _constant(node.left) in _TORCHRUN_VARIABLES:
                return True
    return False


def _constant(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _calls_device_count(node: ast.AST) -> bool:
    return any(
        isinstance(n, ast.Call) and (_dotted(n.func) or "").rpartition(".")[2] in _DEVICE_COUNTS for n in ast.walk(node)
    )


def _names_assigned_from_device_count(tree: ast.AST) -> set[str]:
    """Names that hold the GPU count: `n_gpus = torch.cuda.device_count()`, then `world_size = n_gpus`."""
    assignments: list[tuple[list[str], ast.AST]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets, value = [node.target], node.value
        else:
            continue
        assignments.append(([name for name in map(_dotted, targets) if name], value))
    names: set[str] = set()
    grew = True
    while grew:
        grew = False
        for assigned, source in assignments:
            if set(assigned) <= names:
                continue
            if _calls_device_count(source) or _mentions(source, names):
                names.update(assigned)
                grew = True
    return names


def _mentions(node: ast.AST, names: set[str]) -> bool:
    return any(_dotted(n) in names for n in ast.walk(node) if isinstance(n, (ast.Name, ast.Attribute)))


def _nprocs_per_gpu(call: ast.Call, counted: set[str]) -> bool:
    nprocs = next((k.value for k in call.keywords if k.arg == "nprocs"), None)
    if nprocs is None and len(call.args) >= 3:
        nprocs = call.args[2]
    if nprocs is None:
        return False
    return _calls_device_count(nprocs) or _mentions(nprocs, counted)
