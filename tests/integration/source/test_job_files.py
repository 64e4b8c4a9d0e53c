"""What the code layer (and a local run's working directory) takes from a job directory, and what it leaves
out and why."""

from __future__ import annotations

import subprocess

from vdk.plugin.ml_training.source.job_files import scan_job_dir

PEM_KEY = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n-----END OPENSSH PRIVATE KEY-----\n"


def write(root, relpath, text="x\n"):
    path = root / relpath
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def scanned(job):
    result = scan_job_dir(job)
    return [f.path for f in result.files], {e.path: e.reason for e in result.excluded}


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
