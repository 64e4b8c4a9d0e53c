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


def test_ranks_that_link_at_once_and_outputs_of_an_earlier_attempt_are_kept(tmp_path):
    job = job_dir(tmp_path)
    outputs = tmp_path / "run"
    outputs.mkdir()
    (outputs / "helper.py").write_text("# written by the run: an output, not replaced by the link\n")
    output_workdir.link_tree(str(job), str(outputs))
    output_workdir.link_tree(str(job), str(outputs))  # another rank, the same directory
    assert (outputs / "helper.py").read_text().startswith("# written by the run")
    assert (outputs / "train.py").is_symlink() and (outputs / "data" / "words.txt").is_symlink()
    assert [path for path, _, _ in output_workdir.output_files(str(outputs))] == ["helper.py"]
