"""The job directory comes out of a local run byte for byte, and mtime for mtime, as it went in, whatever the
run's processes write and through whichever channel: Python through a link of the working directory to a big
file, `dd conv=notrunc` and a C write (ctypes' libc) through such a link, a memory map, Python, a shell
subprocess, `touch` and `rm` on the job directory's absolute path. The real `vdk run` (smoke and full), real
torchrun. Where this machine cannot give the run the job directory read-only, big files are copied instead
(up to a limit, with a clear message beyond)."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support.jobs import write_job
from tests.support.vdk_cli import smoke_run
from vdk.plugin.ml_training import plugin
from vdk.plugin.ml_training.local import job_dir_mount
from vdk.plugin.ml_training.local import workdir

pytestmark = pytest.mark.slow

BIG = 6 * 1024 * 1024  # over workdir.COPY_LIMIT: linked (or cloned), not copied

# Every channel, each attempt's outcome noted in attempts.json (which the run writes outside the job).
WRITES = """\
import ctypes
import json
import mmap
import os
import subprocess
import sys

job = os.environ["VDK_ML_TRAINING_JOB_DIR"]
notes = {}


def attempt(name, write):
    try:
        write()
        notes[name] = "written"
    except Exception as e:  # noqa: BLE001 - whatever the write raised is what the test records
        notes[name] = f"{type(e).__name__}: {e}"


def python_through_the_link():
    with open("weights.bin", "r+b") as f:
        f.write(b"python")


def dd_through_the_link():
    subprocess.run(["dd", "if=/dev/zero", "of=data.bin", "bs=1", "count=8", "conv=notrunc"], check=True,
                   capture_output=True)


def c_write_through_the_link():
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open(b"tokens.bin", os.O_WRONLY)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    libc.write(fd, b"native", 6)
    libc.close(fd)


def mmap_through_the_link():
    with open("weights.bin", "r+b") as f, mmap.mmap(f.fileno(), 0) as m:
        m[:4] = b"mmap"


def python_to_the_absolute_path():
    with open(os.path.join(job, "train.py"), "a") as f:
        f.write("# changed")


def shell_to_the_absolute_path():
    subprocess.run(["sh", "-c", f"echo changed >> {job}/config.ini"], check=True, capture_output=True)


def touch_and_rm_in_the_job():
    subprocess.run(["touch", f"{job}/train.py", f"{job}/new-file"], check=True, capture_output=True)
    subprocess.run(["rm", "-f", f"{job}/data.bin"], check=True, capture_output=True)


def c_write_to_the_absolute_path():
    libc = ctypes.CDLL(None, use_errno=True)
    fd = libc.open(os.path.join(job, "tokens.bin").encode(), os.O_WRONLY | os.O_APPEND)
    if fd < 0:
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    libc.write(fd, b"native", 6)
    libc.close(fd)


only = os.environ.get("CHANNELS", "_link,_path,_job").split(",")
for name, write in list(globals().items()):
    if callable(write) and any(name.endswith(end) for end in only):
        attempt(name, write)
with open(os.environ["NOTES"], "w") as f:
    json.dump(notes, f)
"""


def snapshot(root: Path) -> dict[str, tuple]:
    """Every entry below root: its kind, bytes (sha256), mode and mtime in nanoseconds."""
    out: dict[str, tuple] = {}
    for path in sorted([root, *root.rglob("*")]):
        info = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() and not path.is_symlink() else ""
        out[path.relative_to(root).as_posix()] = (info.st_mode, info.st_size, info.st_mtime_ns, digest)
    return out


def leaky_job(tmp_path: Path) -> tuple[Path, Path]:
    notes = tmp_path / "attempts.json"
    job = write_job(
        tmp_path,
        "writes-back",
        ml="gpus_per_node = 0\n",
        env=f"NOTES = {notes}\n",
        files={"train.py": WRITES},
    )
    for name in ("weights.bin", "data.bin", "tokens.bin"):
        (job / name).write_bytes(os.urandom(BIG))
    os.utime(job / "train.py", ns=(1_000_000_000, 1_000_000_000))  # an mtime no write could keep by chance
    return job, notes


@pytest.mark.skipif(not job_dir_mount.available(), reason="this machine has no mount namespaces for a run")
@pytest.mark.parametrize("mode", [[], ["--full"]], ids=["smoke", "full"])
def test_no_channel_changes_the_job_directory(tmp_path, mode):
    job, notes = leaky_job(tmp_path)
    before = snapshot(job)
    done = smoke_run(job, *mode)
    attempts = json.loads(notes.read_text())
    assert len(attempts) == 8, done.stdout
    assert snapshot(job) == before, attempts
    # through the working directory's links, Python's writes go to a private copy, as in the image
    assert attempts["python_through_the_link"] == attempts["mmap_through_the_link"] == "written"
    # every other write of the job's files is refused by the system, whoever makes it
    for channel in ("dd_through_the_link", "c_write_through_the_link", "shell_to_the_absolute_path"):
        assert "Read-only file system" in attempts[channel] or "returned non-zero" in attempts[channel], attempts
    assert "Read-only file system" in attempts["c_write_to_the_absolute_path"], attempts
    assert attempts["python_to_the_absolute_path"].startswith("PermissionError"), attempts
    assert attempts["touch_and_rm_in_the_job"] != "written", attempts


def test_without_mount_namespaces_big_files_are_copied_and_the_job_stays_as_it_was(
    tmp_path, monkeypatch, isolated_environment
):
    monkeypatch.setattr(job_dir_mount, "available", lambda: False)
    job, notes = leaky_job(tmp_path)
    # a native write to the job's absolute path is the one channel only a mount namespace stops: not made here
    (job / "config.ini").write_text((job / "config.ini").read_text() + "CHANNELS = _link,python_to_the_absolute_path\n")
    before = snapshot(job)
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    attempts = json.loads(notes.read_text())
    assert set(attempts) == {
        "python_through_the_link",
        "dd_through_the_link",
        "c_write_through_the_link",
        "mmap_through_the_link",
        "python_to_the_absolute_path",
    }, result.output
    # the writes through the working directory reach its copies; Python's to the job's path are refused
    assert {v for k, v in attempts.items() if k.endswith("_link")} == {"written"}, attempts
    assert attempts["python_to_the_absolute_path"].startswith("PermissionError"), attempts
    assert snapshot(job) == before


def test_without_mount_namespaces_too_many_big_bytes_stop_the_run_before_it_starts(
    tmp_path, monkeypatch, isolated_environment, local_runs_in_a_temporary_directory
):
    monkeypatch.setattr(job_dir_mount, "available", lambda: False)
    monkeypatch.setattr(workdir, "BIG_FILES_LIMIT", 10 * 1024 * 1024)
    job, _ = leaky_job(tmp_path)
    result = CliEntryBasedTestRunner(plugin).invoke(["run", str(job)])
    message = str(result.exception)
    assert result.exit_code != 0
    assert f"{job} holds 18.9 MB in 3 files over 4.2 MB (" in message, message
    assert "cannot give the run the job directory read-only" in message and ".vdkignore" in message
    assert "smoke run PASSED" not in result.output and "smoke run FAILED" not in result.output
    assert list(local_runs_in_a_temporary_directory.iterdir()) == []  # no run directory was left
