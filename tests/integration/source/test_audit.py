"""Provenance from a real git repository."""

import subprocess
from datetime import datetime
from datetime import timezone

from vdk.plugin.ml_training.source import audit


def git(cwd, *args):
    return subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, text=True).stdout


def test_clean_dirty_and_untracked(tmp_path):
    repo = tmp_path / "repo"
    job = repo / "jobs" / "train-job"
    job.mkdir(parents=True)
    (job / "train.py").write_text("print(1)\n")
    git(repo, "init", "-q")
    git(repo, "config", "user.email", "ada@example.com")
    git(repo, "config", "user.name", "Ada")
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    head = git(repo, "rev-parse", "HEAD").strip()

    clean = audit.collect(job, now=datetime(2026, 1, 2, 3, 4, 5, tzinfo=timezone.utc))
    assert clean.git_commit == head
    assert not clean.git_dirty and clean.git_diff_sha256 is None
    assert clean.deployer == "ada@example.com"
    assert clean.created == "2026-01-02T03:04:05Z"

    (job / "train.py").write_text("print(2)\n")
    changed = audit.collect(job)
    assert changed.git_dirty and len(changed.git_diff_sha256) == 64

    (job / "new.py").write_text("x = 1\n")
    with_untracked = audit.collect(job)
    assert with_untracked.git_diff_sha256 != changed.git_diff_sha256
    (job / "new.py").write_text("x = 2\n")
    assert audit.collect(job).git_diff_sha256 != with_untracked.git_diff_sha256


def test_outside_git(tmp_path):
    p = audit.collect(tmp_path)
    assert p.git_commit is None and not p.git_dirty and p.deployer


def test_a_token_in_the_remote_url_is_not_recorded(tmp_path):
    git(tmp_path, "init", "-q")
    git(tmp_path, "-c", "user.email=a@b.c", "-c", "user.name=A", "commit", "-q", "--allow-empty", "-m", "first")
    git(tmp_path, "remote", "add", "origin", "https://oauth2:glpat-secret@gitlab.example.com/ml/jobs.git")
    assert audit.collect(tmp_path).git_remote == "https://gitlab.example.com/ml/jobs.git"
    git(tmp_path, "remote", "set-url", "origin", "git@github.com:org/jobs.git")
    assert audit.collect(tmp_path).git_remote == "git@github.com:org/jobs.git"  # scp-style: no secret to drop
