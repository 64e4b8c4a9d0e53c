"""A rank whose script ended ends as `python script.py` would up to its teardown, and without the teardown: its
threads waited for, its exit handlers run, what it wrote flushed, its own exit code, whatever a library does to
the teardown (tests/support/teardown_crash.py: a library whose destructor aborts the process at exit, as gloo's
threads now and then do). A crash before the script returned fails as under python. Here the bootstrap runs as
a job image runs it (alone, under torchrun, a script that spawns its workers); the local runs' modes:
tests/integration/local/test_finished_ranks.py, in the job's image and its pods: functional_tests/."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import teardown_crash
from tests.support.bootstrap_runs import BOOTSTRAP
from tests.support.bootstrap_runs import environ_without
from tests.support.bootstrap_runs import torchrun_command
from tests.support.job_trees import write
from vdk.plugin.ml_training.runtime.progress_lines import parse_progress

pytestmark = pytest.mark.slow

# As in a pod, but that C's stdio is buffered (PYTHONUNBUFFERED unbuffers it too): what a library printed stays
# in its buffer until the process ends.
_NOT_A_LAUNCHERS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT", "PYTHONUNBUFFERED")


def _job(tmp_path: Path, script: str) -> tuple[Path, Path]:
    job, evidence = tmp_path / "job", tmp_path / "evidence"
    evidence.mkdir()
    for name, content in teardown_crash.job_files(tmp_path / "build", script).items():
        write(job, name, content)
    return job, evidence


def _run(command: list[str], job: Path, evidence: Path) -> subprocess.CompletedProcess:
    env = {
        **environ_without("VDK_ML_TRAINING_", "PET_", "TORCHELASTIC_", names=_NOT_A_LAUNCHERS),
        "CUDA_VISIBLE_DEVICES": "",
        "EVIDENCE_DIR": str(evidence),
    }
    return subprocess.run(command, cwd=job, env=env, capture_output=True, text=True, timeout=300)


def test_a_script_that_returned_ends_with_its_own_code_whatever_its_teardown_does(tmp_path):
    job, evidence = _job(tmp_path, teardown_crash.PLAIN)
    plain = _run([sys.executable, "train.py"], job, evidence)
    assert plain.returncode == -signal.SIGABRT and teardown_crash.TEARDOWN_ABORT in plain.stderr  # under python
    teardown_crash.left_over(evidence, "0")

    done = _run([sys.executable, "-m", BOOTSTRAP, "train.py"], job, evidence)
    assert done.returncode == 0, done.stderr
    assert teardown_crash.TEARDOWN_ABORT not in done.stderr
    assert teardown_crash.left_over(evidence, "0") == teardown_crash.LEFT_OVER
    assert done.stdout == "0: the script returns\n0: in C's stdout buffer\n"  # C's buffer flushed at the end

    exits = _run([sys.executable, "-m", BOOTSTRAP, "train.py", "--exit", "3"], job, evidence)
    assert exits.returncode == 3, exits.stderr
    assert teardown_crash.left_over(evidence, "0") == teardown_crash.LEFT_OVER

    (job / "says.py").write_text("import ctypes, sys\nctypes.CDLL('./abort_at_exit.so')\nsys.exit('no data')\n")
    says = _run([sys.executable, "-m", BOOTSTRAP, "says.py"], job, evidence)
    assert (says.returncode, says.stderr) == (1, "no data\n")  # as python says it, without the abort


def test_a_crash_before_the_script_returned_fails_as_under_python(tmp_path):
    job, evidence = _job(tmp_path, teardown_crash.PLAIN)
    done = _run([sys.executable, "-m", BOOTSTRAP, "train.py", teardown_crash.ABORT_BEFORE_RETURNING], job, evidence)
    assert done.returncode == -signal.SIGABRT
    assert teardown_crash.left_over(evidence, "0") == {}


def test_ddp_ranks_under_torchrun_end_well_after_a_teardown_that_aborts(tmp_path):
    job, evidence = _job(tmp_path, teardown_crash.DDP)
    done = _run(torchrun_command("train.py"), job, evidence)
    assert done.returncode == 0, done.stdout + done.stderr
    assert teardown_crash.TEARDOWN_ABORT not in done.stderr
    for rank in (0, 1):
        assert teardown_crash.left_over(evidence, f"rank-{rank}") == teardown_crash.LEFT_OVER
        assert (
            f"rank-{rank}: the script returns\n" in done.stdout
            and f"rank-{rank}: in C's stdout buffer\n" in done.stdout
        )
    assert parse_progress(done.stdout.splitlines()).fields["script"] == "finished"  # rank 0's last progress line

    crashed = _run(torchrun_command("train.py", teardown_crash.ABORT_BEFORE_RETURNING), job, evidence)
    assert crashed.returncode != 0
    assert "exitcode  : -6" in crashed.stderr and "rank      : 1" in crashed.stderr, crashed.stderr


def test_workers_a_script_spawns_end_as_ranks_do(tmp_path):
    job, evidence = _job(tmp_path, teardown_crash.MP_SPAWN)
    done = _run([sys.executable, "-m", BOOTSTRAP, "train.py"], job, evidence)
    assert done.returncode == 0, done.stdout + done.stderr
    assert teardown_crash.TEARDOWN_ABORT not in done.stderr
    for worker in (0, 1):
        assert teardown_crash.left_over(evidence, f"worker-{worker}") == teardown_crash.LEFT_OVER
    assert done.stdout.endswith("launcher: the script returns\n")
