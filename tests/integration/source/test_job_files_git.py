"""What the code layer takes from a job directory in a real git repository: the .gitignore files at every
level from the repository's root down leave files out, each excluded file names the line that did it, and
.vdkignore can bring files back. (The rest of the scan: tests/unit/source/test_job_files.py.)"""

from __future__ import annotations

import subprocess

from tests.support.job_trees import scanned
from tests.support.job_trees import write


def test_gitignore_at_every_level_and_vdkignore_can_bring_files_back(tmp_path):
    repo = tmp_path / "repo"
    job = repo / "jobs" / "train-job"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    write(repo, ".gitignore", "*.ckpt\n/jobs/train-job/outputs/\n")
    write(repo, "jobs/.gitignore", "scratch/\n")
    write(job, ".gitignore", "data/\n*.log\n!keep.log\n")
    write(job, "pkg/.gitignore", "generated_*.py\n")
    write(job, ".vdkignore", "notebooks/\n!data/\n")
    for path in [
        "train.py",
        "model.ckpt",
        "outputs/run1/metrics.json",
        "scratch/tmp.txt",
        "data/labels.csv",
        "debug.log",
        "keep.log",
        "pkg/core.py",
        "pkg/generated_parser.py",
        "notebooks/explore.ipynb",
        "other/outputs/kept.txt",
    ]:
        write(job, path)

    files, excluded = scanned(job)

    assert files == [
        ".gitignore",
        ".vdkignore",
        "data/labels.csv",
        "keep.log",
        "other/outputs/kept.txt",
        "pkg/.gitignore",
        "pkg/core.py",
        "train.py",
    ]
    assert excluded["model.ckpt"] == "../../.gitignore: *.ckpt"
    assert excluded["outputs/"] == "../../.gitignore: /jobs/train-job/outputs/"
    assert excluded["scratch/"] == "../.gitignore: scratch/"
    assert excluded["debug.log"] == ".gitignore: *.log"
    assert excluded["pkg/generated_parser.py"] == "pkg/.gitignore: generated_*.py"
    assert excluded["notebooks/"] == ".vdkignore: notebooks/"
    assert "data/" not in excluded  # .vdkignore's !data/ wins over .gitignore's data/
