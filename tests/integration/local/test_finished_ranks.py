"""`vdk run` and `vdk run --full`: a rank whose script ended passes and is reported as ended, whatever a library
does to its process's teardown (a library whose destructor aborts it, as gloo's threads now and then do:
tests/support/teardown_crash.py), with what only a process's end writes written (its threads waited for, its
exit handlers run, its files flushed): torchrun's ranks (forked in a smoke run, fresh interpreters in a full run)
and the workers of a script that spawns them. A crash before the script returned fails the run as before.
(The bootstrap as images run it: tests/integration/runtime/test_rank_end.py.)"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from vdk.plugin.test_utils.util_funcs import CliEntryBasedTestRunner

from tests.support import teardown_crash
from tests.support.jobs import write_job
from vdk.plugin.ml_training import plugin

pytestmark = pytest.mark.slow


def _job(tmp_path: Path, script: str, ml: dict[str, str]) -> tuple[Path, Path]:
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    files = teardown_crash.job_files(tmp_path / "build", script)
    config = {"gpus_per_node": "0", "smoke_steps": "5", **ml}  # the scripts take 2 steps: they end by themselves
    return write_job(tmp_path, "ends", ml=config, env={"EVIDENCE_DIR": str(evidence)}, files=files), evidence


def _run(*args: str):
    return CliEntryBasedTestRunner(plugin).invoke(["run", *args])


def _ended(output: str, rank: int) -> bool:
    return re.search(rf"rank {rank}: 2 steps, last loss [-0-9.e]+, the script ended\n", output) is not None


def test_torchruns_ranks_that_finished_pass_in_a_smoke_run_and_a_full_run(tmp_path):
    job, evidence = _job(tmp_path, teardown_crash.DDP, {"procs_per_node": "2", "smoke_processes": "2"})
    for mode in ([], ["--full"]):
        result = _run(*mode, str(job))
        assert result.exit_code == 0, result.output
        assert "run PASSED" in result.output and teardown_crash.TEARDOWN_ABORT not in result.output, result.output
        assert _ended(result.output, 0) and _ended(result.output, 1), result.output
        assert "while Python shut down" not in result.output
        for rank in (0, 1):
            assert teardown_crash.left_over(evidence, f"rank-{rank}") == teardown_crash.LEFT_OVER, mode


def test_a_crash_before_the_script_returned_fails_the_run_as_before(tmp_path):
    job, evidence = _job(tmp_path, teardown_crash.DDP, {"procs_per_node": "2", "smoke_processes": "2"})
    for mode in ([], ["--full"]):
        result = _run(*mode, str(job), "--args", teardown_crash.ABORT_BEFORE_RETURNING)
        assert result.exit_code != 0, result.output
        assert "run FAILED" in result.output and "rank 1 was killed by SIGABRT\n" in result.output, result.output
        assert teardown_crash.left_over(evidence, "rank-1") == {}


def test_the_workers_of_a_script_that_spawns_them_pass_as_ranks_do(tmp_path):
    job, evidence = _job(tmp_path, teardown_crash.MP_SPAWN, {"procs_per_node": "1", "smoke_processes": "2"})
    for mode in ([], ["--full"]):
        result = _run(*mode, str(job))
        assert result.exit_code == 0, result.output
        assert "run PASSED" in result.output and teardown_crash.TEARDOWN_ABORT not in result.output, result.output
        assert "launcher: the script returns" in result.output
        if mode:  # a full run reports its launcher process, which took no step, as rank 0
            assert "rank 0: 0 steps, the script ended\n" in result.output, result.output
        else:  # a smoke run, its workers as ranks
            assert _ended(result.output, 0) and _ended(result.output, 1), result.output
            assert "the launcher process: spawned 2 workers, the script ended\n" in result.output, result.output
        for worker in (0, 1):
            assert teardown_crash.left_over(evidence, f"worker-{worker}") == teardown_crash.LEFT_OVER, mode
