"""No write of a local run's training processes reaches the job directory: writes through the working
directory's links to big job files go to private copies, writes into the job by other paths fail."""

from __future__ import annotations

import hashlib
import json
import site
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

# Every way a script changes a file that was linked in: the guard must turn each into a private copy.
WRITES = """
import json, os, pathlib, shutil, sys
import numpy as np, torch
from vdk.plugin.ml_training.runtime import job_dir_protection
job_dir_protection.install(sys.argv[1], os.getcwd(), sys.argv[2])
with open("append.bin", "ab") as f:
    f.write(b"+appended")
with open("rw.bin", "r+b") as f:
    f.seek(0); f.write(b"RW")
with open("truncate.bin", "wb") as f:
    f.write(b"new")
fd = os.open("osopen.bin", os.O_WRONLY | os.O_APPEND)
os.write(fd, b"+os"); os.close(fd)
pathlib.Path("pathlib.txt").write_text("replaced")
os.truncate("shrink.bin", 2)
os.chmod("chmod.bin", 0o600)
os.utime("utime.bin", (1, 1))
torch.save({"step": 1}, "checkpoint.pt")
np.save("array.npy", np.zeros(3))
from safetensors.torch import save_file
save_file({"w": torch.zeros(2)}, "weights.safetensors")
os.replace("renamed.bin.tmp", "renamed.bin")  # atomic saves replace the link itself
refused = []
for attempt in (
    lambda: open(os.path.join(sys.argv[1], "snapshot.pt"), "w"),
    lambda: open(os.path.join(sys.argv[1], "append.bin"), "ab"),
    lambda: os.remove(os.path.join(sys.argv[1], "rw.bin")),
    lambda: os.mkdir(os.path.join(sys.argv[1], "outputs")),
    lambda: torch.save({}, os.path.join(sys.argv[1], "model.pt")),
):
    try:
        attempt()
        refused.append(False)
    except PermissionError as e:
        refused.append("does not write into the job directory" in str(e))
os.makedirs("outputs", exist_ok=True)
open("outputs/log.txt", "w").write("the run's own")
print(json.dumps({
    "refused": refused,
    "append": open("append.bin", "rb").read()[-9:].decode(),
    "rw": open("rw.bin", "rb").read()[:2].decode(),
    "links": sorted(p for p in os.listdir(".") if os.path.islink(p)),
}))
"""
LINKED = [
    "append.bin",
    "rw.bin",
    "truncate.bin",
    "osopen.bin",
    "pathlib.txt",
    "shrink.bin",
    "chmod.bin",
    "utime.bin",
    "checkpoint.pt",
    "array.npy",
    "weights.safetensors",
    "renamed.bin",
]


def digest(root: Path) -> dict[str, tuple[str, int, int]]:
    """content hash, mode and mtime of every file below root."""
    out = {}
    for path in sorted(root.rglob("*")):
        info = path.stat()
        out[path.relative_to(root).as_posix()] = (
            hashlib.sha256(path.read_bytes()).hexdigest(),
            stat.S_IMODE(info.st_mode),
            info.st_mtime_ns,
        )
    return out


@pytest.fixture
def linked_job(tmp_path):
    """A job directory of files, and a working directory where each is a link to the job's file (as for
    files too big to copy on a filesystem without reflinks)."""
    job, work, run = tmp_path / "job", tmp_path / "run" / "work", tmp_path / "run"
    job.mkdir()
    work.mkdir(parents=True)
    for name in LINKED:
        (job / name).write_bytes(b"original content " * 100)
        (work / name).symlink_to(job / name)
    (work / "renamed.bin.tmp").write_bytes(b"written by an atomic save")
    return job, work, run


def test_writes_through_links_go_to_private_copies_and_never_reach_the_job(linked_job):
    job, work, run = linked_job
    before = digest(job)
    done = subprocess.run(
        [sys.executable, "-c", WRITES, str(job), str(run)], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert digest(job) == before  # not a byte, mode or time of the user's files changed
    assert seen["refused"] == [True] * 5
    assert seen["append"] == "+appended" and seen["rw"] == "RW"  # the copies kept what was there
    assert seen["links"] == []  # every written file is the run's own now
    assert (work / "append.bin").read_bytes() == b"original content " * 100 + b"+appended"
    assert (work / "truncate.bin").read_bytes() == b"new"
    assert (work / "shrink.bin").read_bytes() == b"or"
    assert stat.S_IMODE((work / "chmod.bin").stat().st_mode) == 0o600
    assert (work / "renamed.bin").read_bytes() == b"written by an atomic save"


def test_reading_through_links_and_writing_elsewhere_is_untouched(linked_job, tmp_path):
    job, work, run = linked_job
    script = textwrap.dedent(
        f"""
        import os, sys
        from vdk.plugin.ml_training.runtime import job_dir_protection
        job_dir_protection.install({str(job)!r}, os.getcwd(), {str(run)!r})
        assert open("append.bin", "rb").read(8) == b"original"
        open({str(tmp_path / "elsewhere.txt")!r}, "w").write("outside the job")
        open(os.path.join({str(run)!r}, "rank-0.log"), "a").write("the run's files")
        """
    )
    done = subprocess.run([sys.executable, "-c", script], cwd=work, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "elsewhere.txt").read_text() == "outside the job"
    assert all((work / name).is_symlink() for name in LINKED)  # reading copies nothing


def test_a_virtual_environment_inside_the_job_may_still_be_written_by_python(tmp_path):
    job = tmp_path / "job"
    job.mkdir()
    venv = job / ".venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    script = textwrap.dedent(
        f"""
        import os, site, sys
        for directory in {site.getsitepackages()!r}:
            site.addsitedir(directory)  # the plugin, as installed in the environment of the tests
        from vdk.plugin.ml_training.runtime import job_dir_protection
        job_dir_protection.install({str(job)!r}, os.getcwd(), "")
        open(os.path.join(sys.prefix, "cache.txt"), "w").write("a package's own file")
        os.makedirs({str(job / "pkg" / "__pycache__")!r}, exist_ok=True)
        """
    )
    python = venv / "bin" / "python"
    done = subprocess.run([str(python), "-c", script], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert (venv / "cache.txt").exists()
