"""The job directory, read-only to a local run's processes: torchrun's agent moves into a mount namespace of its
own (Linux; a user namespace too when it does not run as root), where the job directory is bind-mounted
read-only onto itself, and its ranks and everything they start inherit it. A write to the job's files by any
channel — through a link of the working directory, to its absolute path, by native code, `dd`, a subprocess —
fails with EROFS instead of changing them; nothing outside the run's processes sees the mount, and it goes
with them.

`available()` says whether this machine can (a probe in a child process, once per `vdk`); where it cannot
(macOS, a container without user namespaces), local/workdir.py copies the job's files instead of linking
them. Standard library only: the agent calls `protect` before it imports torch or starts a thread.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from collections.abc import Mapping

# The job directory to protect, and the directories inside it that stay writable (runs kept in the job),
# os.pathsep-separated: given by the launcher to torchrun's agent.
PROTECT_ENV = "VDK_ML_TRAINING_PROTECT_JOB_DIR"
WRITABLE_ENV = "VDK_ML_TRAINING_PROTECT_WRITABLE"

_CLONE_NEWNS = 0x00020000
_CLONE_NEWUSER = 0x10000000
_MS_RDONLY = 1
_MS_NOSUID = 2
_MS_NODEV = 4
_MS_NOEXEC = 8
_MS_REMOUNT = 32
_MS_NOATIME = 1024
_MS_NODIRATIME = 2048
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_RELATIME = 1 << 21
# statvfs flags -> the mount flags a remount inside a user namespace must keep (the kernel locks them).
_KEPT = {
    os.ST_NOSUID: _MS_NOSUID,
    os.ST_NODEV: _MS_NODEV,
    os.ST_NOEXEC: _MS_NOEXEC,
    os.ST_NOATIME: _MS_NOATIME,
    os.ST_NODIRATIME: _MS_NODIRATIME,
    os.ST_RELATIME: _MS_RELATIME,
}


def protect(job_dir: str, writable: Iterable[str] = ()) -> None:
    """Make `job_dir` read-only for this process and every process it starts from now (but for `writable`
    directories inside it). Call it while this process has a single thread. OSError when it cannot."""
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, "mount namespaces are Linux's")
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.getuid(), os.getgid()
    _check(libc.unshare(_CLONE_NEWNS if uid == 0 else _CLONE_NEWUSER | _CLONE_NEWNS), "unshare")
    if uid != 0:  # the same user inside: nothing gains a privilege it did not have
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)
    _mount(libc, None, "/", _MS_REC | _MS_PRIVATE)  # nothing done here propagates out of the namespace
    job = os.path.realpath(job_dir)
    inside = [os.path.realpath(p) for p in writable if os.path.realpath(p).startswith(job + os.sep)]
    for path in inside:  # first: a bind of a read-only mount would be read-only too
        _mount(libc, path, path, _MS_BIND | _MS_REC)
    _mount(libc, job, job, _MS_BIND | _MS_REC)
    kept = sum(flag for st, flag in _KEPT.items() if os.statvfs(job).f_flag & st)
    _mount(libc, None, job, _MS_REMOUNT | _MS_BIND | _MS_RDONLY | kept)


def protect_from_environment(environ: Mapping[str, str] | None = None) -> None:
    """`protect` as the launcher asked (PROTECT_ENV), else nothing."""
    environ = os.environ if environ is None else environ
    job = environ.get(PROTECT_ENV)
    if job:
        protect(job, [p for p in environ.get(WRITABLE_ENV, "").split(os.pathsep) if p])


@functools.lru_cache(maxsize=1)
def available() -> bool:
    """Whether this machine lets a run protect a directory so (tried once, in a child process)."""
    if not sys.platform.startswith("linux"):
        return False
    probe = (
        "import os, sys\n"
        "from vdk.plugin.ml_training.local import job_dir_mount\n"
        "job_dir_mount.protect(sys.argv[1])\n"
        "try:\n"
        "    open(os.path.join(sys.argv[1], 'written'), 'w')\n"
        "except OSError:\n"
        "    sys.exit(0)\n"
        "sys.exit(1)\n"
    )
    with tempfile.TemporaryDirectory(prefix="vdk-ml-probe-") as directory:
        try:
            done = subprocess.run(
                [sys.executable, "-c", probe, directory], capture_output=True, timeout=30, check=False
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return done.returncode == 0


def _mount(libc: ctypes.CDLL, source: str | None, target: str, flags: int) -> None:
    encoded = source.encode() if source is not None else None
    _check(libc.mount(encoded, target.encode(), None, ctypes.c_ulong(flags), None), f"mount {target}")


def _check(result: int, what: str) -> None:
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")
