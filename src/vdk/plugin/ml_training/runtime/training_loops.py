"""The loops of the job's own code, so that a smoke run can leave its training loop as if the last epoch had just
ended and the code after it runs: final saves, the test evaluation, export, a push to the Hub.

A smoke rank compiles the job's own Python files (the entrypoint, the modules it imports from the job directory,
and the main module again in the processes multiprocessing spawns) with two additions around every loop; the
files are not changed, and line numbers and tracebacks are the file's own:

    __vdk_loop_7__ = __vdk_ml_loops__.entered()    # on the loop's line: which run of the loop this is
    for epoch in range(args.epochs):
        try:
            ...                                     # the loop's body, as written
        except __vdk_ml_loops__.Leave:              # only the smoke run raises it
            if not __vdk_ml_loops__.mine(7):
                raise
            break

`enclosing(frame)` tells which runs of which loops a point of the code is in (innermost first, through the
callers that are the job's code), and `Leave` raised there for one of them unwinds to it (the `finally` blocks and
`with` exits on the way run) and breaks out of it: the code after it runs as it would after its last iteration.
Which loop is the training loop is epochs.py's decision. A loop's `else:` is not run after a Leave (a `break`).
Code that library frames run, and files outside the job's directories, are compiled as ever. Standard library at
import; the Leave exception comes from steps.py (torch) when first raised.
"""

from __future__ import annotations

import ast
import builtins
import importlib.abc
import importlib.machinery
import itertools
import os
import runpy
import sys
from dataclasses import dataclass
from types import CodeType
from types import FrameType
from typing import Any

NAME = "__vdk_ml_loops__"  # what the compiled loops call: this module, as a builtin
_RUN_OF = "__vdk_loop_{}__"  # the local that holds which run of loop N a frame is in
# Decorators whose function is compiled from its bytecode by another compiler: their loops stay as written.
_OTHER_COMPILERS = {"jit", "njit", "vectorize", "guvectorize", "cfunc", "generated_jit", "stencil", "kernel"}


@dataclass(frozen=True)
class Loop:
    """A loop of the job's code: where it is, and the code object it runs in."""

    id: int
    file: str
    line: int  # the `for` / `while` line
    body_start: int
    body_end: int
    code_name: str  # the function it is in, or "<module>"
    code_line: int  # that function's first line (its first decorator's), 0 for a module

    def where(self, roots: tuple[str, ...] = ()) -> str:
        """`train.py:42`: the file relative to the job's directory, and the loop's line."""
        return f"{relative(self.file, roots or _roots)}:{self.line}"


@dataclass(frozen=True)
class Site:
    """A run of a loop that a point of the code is in: the frame (by id), the loop, the run (a number that no other
    run of any loop has)."""

    frame: int
    loop: Loop
    run: int | None

    @property
    def key(self) -> tuple[int, int | None]:
        return self.loop.id, self.run


_loops: dict[int, Loop] = {}
_by_code: dict[tuple[str, str, int], list[Loop]] = {}
_ids = itertools.count(1)
_runs = itertools.count(1)
_roots: tuple[str, ...] = ()
_installed = False


# --- what the compiled loops call --------------------------------------------------------------------------------


def entered() -> int:
    """A loop starts a run: its number."""
    return next(_runs)


def mine(loop_id: int) -> bool:
    """In the handler of loop `loop_id`: whether the Leave being handled is for this loop in this frame."""
    error = sys.exc_info()[1]
    return getattr(error, "loop_id", None) == loop_id and getattr(error, "frame_id", None) == id(sys._getframe(1))


def __getattr__(name: str) -> Any:
    if name == "Leave":  # the compiled loops' `except __vdk_ml_loops__.Leave`: from steps.py, which imports torch
        from vdk.plugin.ml_training.runtime.steps import LeaveLoop

        return LeaveLoop
    raise AttributeError(name)


# --- compiling the job's code ------------------------------------------------------------------------------------


def install(roots: list[str]) -> None:
    """From now on, the job's own files (below `roots`) are compiled with their loops marked: the script run by
    runpy (here, and in processes multiprocessing spawns), and the modules imported from the job's directories."""
    global _roots, _installed
    _roots = tuple(dict.fromkeys(os.path.realpath(r) for r in roots if r))
    if _installed:
        return
    _installed = True
    setattr(builtins, NAME, sys.modules[__name__])
    original = runpy._get_code_from_file  # type: ignore[attr-defined]  # runpy's helper of run_path

    def _get_code_from_file(*args: Any) -> Any:
        fname = args[-1]  # (run_name, fname) up to Python 3.11, (fname) after
        path = os.path.abspath(os.fsdecode(fname))
        if is_job_file(path) and path.endswith(".py"):
            with open(path, "rb") as f:
                return compile_marked(f.read(), fname), fname
        return original(*args)

    runpy._get_code_from_file = _get_code_from_file  # type: ignore[attr-defined]  # the script: runpy.run_path
    sys.meta_path.insert(0, _JobModules())


def is_job_file(path: str) -> bool:
    """A file of the job's own code: below one of its directories, and not an installed package."""
    real = os.path.realpath(path)
    if any(part in ("site-packages", "dist-packages") for part in real.split(os.sep)):
        return False
    return any(real == root or real.startswith(root + os.sep) for root in _roots)


def compile_marked(source: bytes | str, filename: str) -> CodeType:
    """`source` compiled with its loops marked; as written when it cannot be (a syntax error is then the compiler's
    own, as under python)."""
    try:
        tree = ast.parse(source, filename)
        tree = _Marker(os.path.realpath(filename)).visit(tree)
        ast.fix_missing_locations(tree)
        return compile(tree, filename, "exec", dont_inherit=True)
    except (SyntaxError, ValueError, TypeError, RecursionError):
        return compile(source, filename, "exec", dont_inherit=True)


class _JobModules(importlib.abc.MetaPathFinder):
    """Modules of the job's directories: loaded from their source, with their loops marked (no bytecode cache)."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        if spec is None or not isinstance(spec.loader, importlib.machinery.SourceFileLoader):
            return None
        if not spec.origin or not is_job_file(spec.origin):
            return None
        spec.loader = _MarkedLoader(spec.loader.name, spec.loader.path)
        return spec


class _MarkedLoader(importlib.machinery.SourceFileLoader):
    def get_code(self, fullname: str | None = None) -> CodeType:
        return compile_marked(self.get_data(self.path), self.path)


class _Marker(ast.NodeTransformer):
    def __init__(self, file: str):
        self.file = file
        self.scopes: list[tuple[str, int]] = [("<module>", 0)]
        self.in_class = False

    def visit_FunctionDef(self, node: Any) -> Any:
        if any(_decorator_name(d) in _OTHER_COMPILERS for d in node.decorator_list):
            return node
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        self.scopes.append((node.name, first))
        in_class, self.in_class = self.in_class, False
        self.generic_visit(node)
        self.scopes.pop()
        self.in_class = in_class
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> Any:
        in_class, self.in_class = self.in_class, True  # a class body's loops: its namespace is not a frame's locals
        self.generic_visit(node)
        self.in_class = in_class
        return node

    def visit_Lambda(self, node: ast.Lambda) -> Any:
        return node

    def _loop(self, node: Any) -> Any:
        self.generic_visit(node)
        if self.in_class or not node.body:
            return node
        name, first = self.scopes[-1]
        loop = Loop(next(_ids), self.file, node.lineno, node.body[0].lineno, _end(node.body), name, first)
        _loops[loop.id] = loop
        _by_code.setdefault((self.file, name, first), []).append(loop)
        # the additions sit on the loop's line (a module's statements have no parent to take an end from)
        at = {"lineno": node.lineno, "col_offset": node.col_offset}
        at.update(end_lineno=node.lineno, end_col_offset=node.col_offset)
        runtime = ast.Name(id=NAME, ctx=ast.Load(), **at)
        handler = ast.ExceptHandler(
            type=ast.Attribute(value=runtime, attr="Leave", ctx=ast.Load(), **at),
            name=None,
            body=[
                ast.If(
                    test=ast.UnaryOp(
                        op=ast.Not(),
                        operand=ast.Call(
                            func=ast.Attribute(value=runtime, attr="mine", ctx=ast.Load(), **at),
                            args=[ast.Constant(loop.id, **at)],
                            keywords=[],
                            **at,
                        ),
                        **at,
                    ),
                    body=[ast.Raise(exc=None, cause=None, **at)],
                    orelse=[],
                    **at,
                ),
                ast.Break(**at),
            ],
            **at,
        )
        node.body = [ast.Try(body=node.body, handlers=[handler], orelse=[], finalbody=[], **at)]
        run = ast.Assign(
            targets=[ast.Name(id=_RUN_OF.format(loop.id), ctx=ast.Store(), **at)],
            value=ast.Call(
                func=ast.Attribute(value=runtime, attr="entered", ctx=ast.Load(), **at), args=[], keywords=[], **at
            ),
            **at,
        )
        return [run, node]

    visit_For = visit_AsyncFor = visit_While = _loop


def _decorator_name(node: ast.expr) -> str:
    while isinstance(node, ast.Call):
        node = node.func
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _end(body: list[ast.stmt]) -> int:
    last = body[-1]
    return getattr(last, "end_lineno", None) or last.lineno


# --- where the code is -------------------------------------------------------------------------------------------


def enclosing(frame: FrameType | None) -> list[Site]:
    """The runs of the job's loops that `frame` and its callers are in, innermost first. A frame on a loop's own
    line (evaluating what it iterates, or its condition) is not in it."""
    sites: list[Site] = []
    while frame is not None:
        code = frame.f_code
        loops = _by_code.get((os.path.realpath(code.co_filename), code.co_name, _first_line(code)))
        line = frame.f_lineno
        if loops and line is not None:
            inside = sorted((lp for lp in loops if lp.body_start <= line <= lp.body_end), key=lambda lp: -lp.body_start)
            if inside:
                names = frame.f_locals
                sites += [Site(id(frame), lp, names.get(_RUN_OF.format(lp.id))) for lp in inside]
        frame = frame.f_back
    return sites


def _first_line(code: CodeType) -> int:
    return 0 if code.co_name == "<module>" else code.co_firstlineno


def job_frame(frame: FrameType | None) -> FrameType | None:
    """The innermost frame of the job's own code, from `frame` outwards."""
    while frame is not None and not is_job_file(frame.f_code.co_filename):
        frame = frame.f_back
    return frame


def where(frame: FrameType | None) -> str:
    """`train.py:57` of a frame of the job's code ('' without one)."""
    if frame is None:
        return ""
    return f"{relative(frame.f_code.co_filename, _roots)}:{frame.f_lineno}"


def relative(path: str, roots: tuple[str, ...]) -> str:
    real = os.path.realpath(path)
    for root in roots:
        if real.startswith(root + os.sep):
            return real[len(root) + 1 :]
    return os.path.basename(path)


def marked() -> bool:
    """Whether the job's code is compiled with its loops marked in this process."""
    return _installed
