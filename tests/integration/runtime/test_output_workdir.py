"""A cluster run's working directory (runtime/output_workdir.py): the bootstrap links the image's job directory
into the run's output directory and works there, so what the code writes relative to it persists beside
code that stays where it was, and a restart resumes; rank 0's summary line and its reader."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from vdk.plugin.ml_training.runtime import output_workdir

BOOTSTRAP = "vdk.plugin.ml_training.runtime.bootstrap"

# A tutorial-style script: resumes from snapshot.json in its working directory, imports a sibling module,
# reads a data file next to it, writes its outputs relative to where it runs.
SCRIPT = """
import json, os
import helper

if os.path.exists("snapshot.json"):
    with open("snapshot.json") as f:
        start = json.load(f)["epoch"] + 1
    print(f"resuming at epoch {start}")
else:
    start = 0
with open("data/words.txt") as f:
    words = f.read().split()
for epoch in range(start, start + 2):
    with open("snapshot.json", "w") as f:
        json.dump({"epoch": epoch}, f)
os.makedirs("out/final", exist_ok=True)
with open("out/final/model.bin", "wb") as f:
    f.write(helper.weights(len(words)))
print("cwd", os.getcwd(), "file", __file__)
"""


def job_dir(root: Path) -> Path:
    job = root / "image-job"
    (job / "data").mkdir(parents=True)
    (job / "train.py").write_text(textwrap.dedent(SCRIPT))
    (job / "helper.py").write_text("def weights(n):\n    return bytes(range(n))\n")
    (job / "data" / "words.txt").write_text("a b c")
    return job


def run_in_image(job: Path, outputs: Path | None, rank: str = "0") -> subprocess.CompletedProcess:
    """The bootstrap as a pod starts it: in the image's job directory, no local launcher."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("VDK_ML_TRAINING_")}
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
    job = job_dir(tmp_path)
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
    job = job_dir(tmp_path)
    other = run_in_image(job, tmp_path / "run", rank="1")
    assert other.returncode == 0 and output_workdir.MARK not in other.stdout
    plain = run_in_image(job, None)
    assert plain.returncode == 0 and f"cwd {job}" in plain.stdout and output_workdir.MARK not in plain.stdout
    assert (job / "snapshot.json").exists()  # as before: in the image's directory


def test_an_output_directory_that_cannot_be_made_stops_the_rank_saying_why(tmp_path):
    job = job_dir(tmp_path)
    blocked = tmp_path / "not-a-directory"
    blocked.write_text("")
    done = run_in_image(job, blocked / "run")
    assert done.returncode == 1
    assert "cannot work in the output directory" in done.stdout and "output_pvc" in done.stdout
