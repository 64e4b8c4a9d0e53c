"""Local runs: nothing the training processes write reaches the job directory.

They run in a working directory outside the job (local/workdir.py) where big files may be symbolic links
to the job's own files. A write through such a link would change the user's file, so this process turns
it into a write to a private copy first, as a copy-on-write filesystem would: opening the file for
writing (Python's open, io, os.open, pathlib, numpy...), os.truncate, os.chmod, os.chown and os.utime
replace the link by a copy of the file (or, for a write that truncates it, by nothing), and torch.save
and safetensors' save_file, which write from native code, do the same before they start. A write into
the job directory by any other path (an absolute path) fails with PermissionError: on the cluster that
path does not exist either. Standard library only (an audit hook); torch and safetensors are wrapped
when the code imports them.
"""

from __future__ import annotations

import errno
import os
import shutil
import sys
import threading

# os.open flags that mean the file will be written.
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
# Audit events that change the file a path leads to (following links), its content or attributes.
_CHANGES_TARGET = ("os.truncate", "os.chmod", "os.chown", "os.utime")
# Audit events that change directory entries (a link is replaced, never followed) -> which arguments name them.
_CHANGES_ENTRY = {
    "os.remove": (0,),
    "os.rmdir": (0,),
    "os.mkdir": (0,),
    "shutil.rmtree": (0,),
    "os.rename": (0, 1),
    "os.link": (1,),
    "os.symlink": (1,),
}

_guard: _Guard | None = None


class _Guard:
    def __init__(self, job_dir: str, work_dir: str, run_dir: str):
        self.job_dir = os.path.realpath(job_dir)
        self.work_dir = os.path.realpath(work_dir)
        # The run's own files, should runs be kept inside the job directory, and what Python itself may
        # write inside one (a virtual environment kept there: bytecode, packages).
        allowed = (work_dir, run_dir, sys.prefix, sys.exec_prefix, sys.base_prefix)
        self.exempt = tuple({os.path.realpath(p) for p in allowed if p})
        self.busy = threading.local()

    def audit(self, event: str, args: tuple) -> None:
        if event == "open":
            flags = args[2] if len(args) > 2 and isinstance(args[2], int) else 0
            if flags & _WRITE_FLAGS:
                self.before_write(args[0], truncate=bool(flags & os.O_TRUNC), exclusive=bool(flags & os.O_EXCL))
        elif event in _CHANGES_TARGET:
            self.before_write(args[0], truncate=False, exclusive=False)
        elif event in _CHANGES_ENTRY:
            for index in _CHANGES_ENTRY[event]:
                if index < len(args):
                    self.refuse_in_job(args[index], follow=False)

    def before_write(self, path: object, truncate: bool, exclusive: bool = False) -> None:
        """Before `path` is written: a link of the working directory to a job file becomes a private copy."""
        if not isinstance(path, (str, bytes, os.PathLike)) or getattr(self.busy, "on", False):
            return
        self.busy.on = True
        try:
            lexical = os.path.abspath(os.fsdecode(os.fspath(path)))
            if not exclusive and _within(lexical, self.work_dir) and os.path.islink(lexical):
                target = os.path.realpath(lexical)
                if _within(target, self.job_dir):
                    _detach(lexical, target, copy=not truncate)
            self.refuse_in_job(lexical, follow=True)
        finally:
            self.busy.on = False

    def refuse_in_job(self, path: object, follow: bool) -> None:
        if not isinstance(path, (str, bytes, os.PathLike)):
            return
        lexical = os.path.abspath(os.fsdecode(os.fspath(path)))
        where = os.path.realpath(lexical) if follow else os.path.join(os.path.realpath(os.path.dirname(lexical)), "x")
        if not _within(where, self.job_dir) or "__pycache__" in lexical.split(os.sep):
            return
        if any(_within(where, exempt) for exempt in self.exempt):
            return
        raise PermissionError(
            errno.EACCES,
            f"a local run does not write into the job directory {self.job_dir} (its working directory is "
            f"{self.work_dir}, a copy of what the job's image holds): write relative to the working "
            "directory, or outside the job",
            os.fsdecode(os.fspath(path)),
        )


def _within(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def _detach(link: str, target: str, copy: bool) -> None:
    """Replace the symbolic link `link` by a copy of `target` (or by nothing: the write makes the file)."""
    if not copy:
        os.unlink(link)
        return
    temporary = f"{link}.vdk-copy-{os.getpid()}"
    shutil.copyfile(target, temporary)
    shutil.copymode(target, temporary)
    os.replace(temporary, link)


def before_write(path: object) -> None:
    """For writers that the audit hook does not see (native code): call before `path` is (re)written."""
    if _guard is not None:
        _guard.before_write(path, truncate=True)


def _wrap_writer(module: object, name: str, path_argument: int) -> None:
    original = getattr(module, name, None)
    if original is None or getattr(original, "_vdk_write_guard", False):
        return

    def write(*args, **kwargs):
        path = args[path_argument] if len(args) > path_argument else kwargs.get("f", kwargs.get("filename"))
        before_write(path)
        return original(*args, **kwargs)

    write._vdk_write_guard = True  # type: ignore[attr-defined]  # attribute of a function object
    write.__wrapped__ = original  # type: ignore[attr-defined]  # attribute of a function object
    write.__name__ = getattr(original, "__name__", name)
    write.__doc__ = getattr(original, "__doc__", None)
    setattr(module, name, write)


def install(job_dir: str, work_dir: str, run_dir: str = "") -> None:
    """Guard this process (once): no write reaches `job_dir` (but for `work_dir` and `run_dir`, should
    they lie inside it); links of `work_dir` to the job's files are copied on write."""
    global _guard
    if _guard is not None:
        return
    from vdk.plugin.ml_training.runtime import post_import

    _guard = _Guard(job_dir, work_dir, run_dir)
    sys.addaudithook(_guard.audit)

    def torch_writers(torch: object) -> None:
        _wrap_writer(torch, "save", 1)
        _wrap_writer(sys.modules["torch.serialization"], "save", 1)

    post_import.when_imported("torch", torch_writers)
    for module in ("safetensors.torch", "safetensors.numpy"):
        post_import.when_imported(module, lambda m: _wrap_writer(m, "save_file", 1))
