"""The working directory of local runs: exactly the files of the image's code layer, small ones copied,
big ones cloned or linked, and never a way back into the job directory."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.support.job_trees import PEM_KEY
from tests.support.job_trees import write
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.local import workdir


def tree(root: Path) -> dict[str, str]:
    """relative path -> "file", "link -> target" for everything below root."""
    out = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = f"link -> {os.readlink(path)}"
        elif path.is_file():
            out[rel] = "file"
    return out


def test_it_holds_what_the_image_holds_and_nothing_else(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py", "print('train')\n")
    write(job, "run.sh", "#!/bin/sh\n", mode=0o755)
    write(job, "pkg/model.py")
    write(job, "config.ini", "[job]\ntype = ml-training\n")
    write(job, ".gitignore", "data/\n*.ckpt\n")
    write(job, "data/train.csv")  # ignored by the user's rules
    write(job, "old.ckpt")
    write(job, ".env", "TOKEN=secret\n")  # secrets never
    write(job, "deploy_key", PEM_KEY)
    write(job, "__pycache__/train.cpython-311.pyc")
    (job / "model.py").symlink_to("pkg/model.py")  # a link inside the job stays a link
    work = workdir.prepare(job, tmp_path / "run" / "work")
    assert tree(work.path) == {
        ".gitignore": "file",
        "config.ini": "file",
        "model.py": "link -> pkg/model.py",
        "pkg/model.py": "file",
        "run.sh": "file",
        "train.py": "file",
    }
    assert (work.path / "train.py").read_text() == "print('train')\n"
    assert os.access(work.path / "run.sh", os.X_OK) and not os.access(work.path / "train.py", os.X_OK)
    assert {e.path for e in work.excluded} >= {"data/", "old.ckpt", ".env", "deploy_key", "__pycache__/"}
    assert work.exclusion("data/train.csv").reason == ".gitignore: data/"
    assert work.exclusion("train.py") is None
    assert work.linked == ()


def test_big_files_are_linked_not_copied(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir, "COPY_LIMIT", 1000)
    job = tmp_path / "job"
    write(job, "train.py")
    big = write(job, "weights/base.bin", b"w" * 5000)
    work = workdir.prepare(job, tmp_path / "work")
    placed = work.path / "weights" / "base.bin"
    # a reflink where the filesystem has them (a private copy), else a link to the job's file
    assert placed.read_bytes() == big.read_bytes()
    if placed.is_symlink():
        assert os.readlink(placed) == str(big) and work.linked == ("weights/base.bin",)
    else:
        assert placed.stat().st_ino != big.stat().st_ino and work.linked == ()


def test_a_run_directory_inside_the_job_is_not_copied_into_itself(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py")
    write(job, "runs/old/agent.log")
    work = workdir.prepare(job, job / "runs" / "now" / "work")
    assert sorted(tree(work.path)) == ["runs/old/agent.log", "train.py"]


def test_paths_of_the_working_directory_read_as_the_jobs(tmp_path):
    job = tmp_path / "job"
    write(job, "train.py")
    work = workdir.prepare(job, tmp_path / "work")
    trace = f'  File "{work.path}/train.py", line 3, in <module>\n  File "/usr/lib/python3.11/x.py"'
    assert (
        work.to_job_paths(trace)
        == f'  File "{job.resolve()}/train.py", line 3, in <module>\n  File "/usr/lib/python3.11/x.py"'
    )


def test_where_the_job_directory_cannot_be_read_only_big_files_are_copied(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir, "COPY_LIMIT", 1000)
    job = tmp_path / "job"
    write(job, "train.py")
    big = write(job, "weights/base.bin", b"w" * 5000)
    work = workdir.prepare(job, tmp_path / "work", protected=False)
    placed = work.path / "weights" / "base.bin"
    assert not placed.is_symlink() and placed.read_bytes() == big.read_bytes() and work.linked == ()
    assert placed.stat().st_ino != big.stat().st_ino


def test_too_many_big_bytes_to_copy_stop_before_anything_is_made(tmp_path, monkeypatch):
    monkeypatch.setattr(workdir, "COPY_LIMIT", 1000)
    monkeypatch.setattr(workdir, "BIG_FILES_LIMIT", 8000)
    job = tmp_path / "job"
    write(job, "train.py")
    for name in ("a.bin", "data/b.bin", "data/c.bin", "d.bin"):
        write(job, name, b"w" * 3000)
    with pytest.raises(MLTrainingError) as caught:
        workdir.prepare(job, tmp_path / "work", protected=False)
    assert caught.value.problem.startswith(f"{job} holds 12.0 KB in 4 files over 1.0 KB (a.bin (3.0 KB), ")
    assert ", ...); a local run copies them" in caught.value.problem
    assert "move data out of the job directory" in caught.value.fix and ".vdkignore" in caught.value.fix
    assert not (tmp_path / "work").exists()
    assert workdir.prepare(job, tmp_path / "linked", protected=True).path.is_dir()  # where it may link: no limit


def test_a_file_set_found_already_is_what_it_holds(tmp_path):
    from vdk.plugin.ml_training.source.job_files import scan_job_dir

    job = tmp_path / "job"
    write(job, "train.py", "print('train')\n")
    files = scan_job_dir(job)  # what the command found, once: the image's code layer gets the same
    write(job, "later.py", "print('written after the scan')\n")
    made = workdir.prepare(job, tmp_path / "run" / "work", files=files)
    assert tree(made.path) == {"train.py": "file"}
    assert tree(workdir.prepare(job, tmp_path / "again" / "work").path) == {"later.py": "file", "train.py": "file"}
