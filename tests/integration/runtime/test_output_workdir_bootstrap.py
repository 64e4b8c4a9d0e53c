"""A cluster run's working directory (runtime/output_workdir.py), with the bootstrap as a pod starts it:
it links the image's job directory into the run's output directory and works there, so what the code
writes relative to it persists beside code that stays where it was, and a restart resumes; only rank 0
prints the summary line, and it reads back; without an output directory nothing changes; one that
cannot be made stops the rank saying why."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.support.bootstrap_runs import BOOTSTRAP
from tests.support.bootstrap_runs import environ_without
from tests.support.tutorial_job import tutorial_job
from vdk.plugin.ml_training.runtime import output_workdir


def run_in_image(job: Path, outputs: Path | None, rank: str = "0") -> subprocess.CompletedProcess:
    """The bootstrap as a pod starts it: in the image's job directory, no local launcher."""
    env = environ_without("VDK_ML_TRAINING_")
    env.update(RANK=rank, PYTHONDONTWRITEBYTECODE="1")
    if outputs is not None:
        env["VDK_ML_TRAINING_OUTPUT_DIR"] = str(outputs)
    return subprocess.run(
        [sys.executable, "-m", BOOTSTRAP, "train.py"], cwd=job, env=env, capture_output=True, text=True, timeout=60
    )


def files(directory: Path) -> dict[str, str]:
    return {
        str(p.relative_to(directory)): ("link" if p.is_symlink() else "file")
        for p in sorted(directory.rglob("*"))
        if not p.is_dir() or p.is_symlink()
    }


def test_the_code_writes_into_the_output_directory_and_a_restart_resumes_from_it(tmp_path):
    job = tutorial_job(tmp_path)
    before = files(job)
    outputs = tmp_path / "claim" / "run-1"  # the kubelet makes the run's directory of the claim

    first = run_in_image(job, outputs)
    assert first.returncode == 0, first.stderr
    assert f"cwd {outputs}" in first.stdout and f"file {outputs / 'train.py'}" in first.stdout
    assert "resuming" not in first.stdout
    assert files(job) == before  # the image's job directory is unchanged
    assert files(outputs) == {
        "data/words.txt": "link",
        "helper.py": "link",
        "out/final/model.bin": "file",
        "snapshot.json": "file",
        "train.py": "link",
    }
    assert os.readlink(outputs / "train.py") == str(job / "train.py")
    summary = output_workdir.parse_summary(first.stdout.splitlines())
    assert summary == output_workdir.OutputSummary(2, 3 + len('{"epoch": 1}'), str(outputs))

    restarted = run_in_image(job, outputs)  # the pod again: its files are there
    assert restarted.returncode == 0, restarted.stderr
    assert "resuming at epoch 2" in restarted.stdout


def test_only_rank_0_reports_and_without_an_output_directory_nothing_changes(tmp_path):
    job = tutorial_job(tmp_path)
    other = run_in_image(job, tmp_path / "run", rank="1")
    assert other.returncode == 0 and output_workdir.MARK not in other.stdout
    plain = run_in_image(job, None)
    assert plain.returncode == 0 and f"cwd {job}" in plain.stdout and output_workdir.MARK not in plain.stdout
    assert (job / "snapshot.json").exists()  # as before: in the image's directory


def test_an_output_directory_that_cannot_be_made_stops_the_rank_saying_why(tmp_path):
    job = tutorial_job(tmp_path)
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    done = run_in_image(job, blocked / "run")
    assert done.returncode == 1
    assert "cannot work in the output directory" in done.stdout and "output_pvc" in done.stdout
