"""Which rank is to blame, from result files and torchrun's log as real runs write them: the rank
that failed first, not the peers that failed because of it."""

from __future__ import annotations

from tests.support.local_outcomes import make_run
from vdk.plugin.ml_training.cli.local_summary import format_summary
from vdk.plugin.ml_training.local.launch_plan import full_plan
from vdk.plugin.ml_training.local.launcher import RUNS_DIR_ENV
from vdk.plugin.ml_training.local.launcher import LocalRun
from vdk.plugin.ml_training.local.launcher import runs_dir
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.ops.plan_runner import failure_fix
from vdk.plugin.ml_training.runtime import protocol

CONNECTION_CLOSED = {
    "type": "RuntimeError",
    "message": "RuntimeError: [pair.cc:553] Connection closed by peer [127.0.0.1]:31383.",
    "traceback": "Traceback (most recent call last):\n  ...\nRuntimeError: Connection closed by peer\n",
}
VALUE_ERROR = {
    "type": "ValueError",
    "message": "ValueError: bad batch",
    "traceback": "Traceback ...\nValueError: bad batch\n",
}

# As torchrun's agent logs a failure of ranks it started as fresh interpreters: every failed rank listed.
SPAWNED_FAILURES = (
    "E1130 07:40:44.229000 6352 torch/distributed/elastic/multiprocessing/api.py:1002] failed (exitcode: -11) "
    "local_rank: 1 (pid: 6413) of binary: python\n"
    """torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
bootstrap FAILED
------------------------------------------------------------
Failures:
[1]:
  time      : 2026-11-30_07:40:44
  host      : localhost
  rank      : 0 (local_rank: 0)
  exitcode  : -15 (pid: 6412)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 6412
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-30_07:40:44
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -11 (pid: 6413)  (SIGSEGV)
  error_file: <N/A>
  traceback : Signal 11 (SIGSEGV) received by PID 6413
============================================================
"""
)
# Forked ranks: only the first rank seen to end is named.
FORKED_FIRST_FAILURE = (
    "E1130 07:50:30.180000 11015 torch/distributed/elastic/multiprocessing/api.py:836] failed (exitcode: 1) "
    "local_rank: 0 (pid: 100) of fn: run_script_path (start_method: fork)\n"
)


def test_the_first_exception_is_the_root_cause_and_later_ones_its_consequences(tmp_path):
    run = make_run(
        tmp_path,
        {
            0: {"status": "failed", "ended_at": 11.0, "error": CONNECTION_CLOSED, "steps": 1},
            1: {"status": "failed", "ended_at": 10.0, "error": VALUE_ERROR, "steps": 0},
        },
        FORKED_FIRST_FAILURE,  # torchrun happened to see rank 0 end first
    )
    outcome = analyse(run)
    assert not outcome.passed
    assert outcome.root_cause.rank == 1
    assert outcome.headline == "rank 1 failed: ValueError: bad batch"
    assert [r.rank for r in outcome.consequences] == [0]


def test_a_rank_that_vanished_without_a_word_outranks_its_peers_errors(tmp_path):
    run = make_run(
        tmp_path,
        {0: {"status": "failed", "ended_at": 11.0, "error": CONNECTION_CLOSED}, 1: {"status": "running"}},
        FORKED_FIRST_FAILURE,
    )
    outcome = analyse(run)
    assert outcome.root_cause.rank == 1
    assert outcome.headline.startswith("rank 1 died without a Python error (a signal such as SIGKILL")


def test_a_vanished_rank_is_blamed_although_it_named_its_main_thread_in_its_stack_file(tmp_path):
    # every rank writes that header when it starts: it is not a dump (faulthandler wrote nothing: SIGKILL)
    header = protocol.stack_file_header()
    run = make_run(
        tmp_path,
        {
            0: {"status": "failed", "ended_at": 11.0, "error": CONNECTION_CLOSED},
            1: {"status": "running", "stack": header},
        },
        FORKED_FIRST_FAILURE,  # torchrun happened to see rank 0 end first
    )
    outcome = analyse(run)
    assert outcome.root_cause.rank == 1
    assert outcome.headline.startswith("rank 1 died without a Python error (a signal such as SIGKILL")


def test_a_rank_stopped_by_torchrun_after_anothers_failure_is_not_blamed(tmp_path):
    run = make_run(
        tmp_path,
        {
            0: {"status": "failed", "ended_at": 11.0, "error": VALUE_ERROR},
            1: {"status": "running", "stack": 'Current thread 0x01 (most recent call first):\n  File "t.py", line 3'},
        },
        FORKED_FIRST_FAILURE
        + "W1130 torch/distributed/elastic/multiprocessing/api.py:857] Closing process 101 via signal SIGTERM\n",
    )
    outcome = analyse(run)
    assert outcome.root_cause.rank == 0 and outcome.consequences == []


def test_exit_statuses_listed_by_torchrun_name_the_signal(tmp_path):
    ranks = {0: {"status": "running", "stack": "Thread 0x1..."}, 1: {"status": "running"}}
    run = make_run(tmp_path, ranks, SPAWNED_FAILURES)
    outcome = analyse(run)
    assert outcome.root_cause.rank == 1
    assert outcome.headline == "rank 1 was killed by SIGSEGV"
    assert outcome.ranks[0].exit_code == -15 and not outcome.ranks[0].died_abruptly


def test_a_crash_dump_names_the_crash_when_torchrun_names_no_status(tmp_path):
    crash = (
        "Fatal Python error: Segmentation fault\n\n"
        'Current thread 0x1 (most recent call first):\n  File "t.py", line 9 in <module>\n'
    )
    ranks = {
        0: {"status": "failed", "ended_at": 5.0, "error": CONNECTION_CLOSED},
        1: {"status": "running", "stack": crash},
    }
    run = make_run(tmp_path, ranks)
    outcome = analyse(run)
    assert outcome.headline == "rank 1 crashed (Segmentation fault)"


def test_a_timeout_names_the_ranks_still_running(tmp_path):
    dump = 'Current thread 0x01 (most recent call first):\n  File "t.py", line 3 in <module>\n'
    run = make_run(
        tmp_path,
        {0: {"status": "stopped", "steps": 2}, 1: {"status": "running", "stack": dump}},
        exit_code=-9,
        timed_out=True,
    )
    outcome = analyse(run)
    assert outcome.root_cause is None
    assert outcome.headline == "timed out after 10m (smoke_timeout): rank 1 still running"


def test_torchrun_failing_before_any_rank_started(tmp_path):
    outcome = analyse(make_run(tmp_path, {}, "ValueError: bad torchrun flag\n", exit_code=1))
    assert outcome.headline == "torchrun failed before any rank started (exit code 1)"


def test_a_pass_warns_about_short_loops_missing_steps_and_bad_losses(tmp_path):
    run = make_run(
        tmp_path,
        {
            0: {"status": "finished", "steps": 1, "last_loss": "nan"},
            1: {"status": "finished", "steps": 1, "last_loss": 0.5},
        },
        exit_code=0,
    )
    outcome = analyse(run)
    assert outcome.passed
    assert outcome.warnings == [
        "the script ended by itself after 1 of 2 optimizer steps (smoke_steps) on every rank: its training loop is "
        "shorter than the smoke run",
        "rank 0: the last loss is nan",
    ]
    some = analyse(
        make_run(
            tmp_path / "b", {0: {"status": "stopped", "steps": 2}, 1: {"status": "finished", "steps": 0}}, exit_code=0
        )
    )
    assert some.passed and some.warnings == [
        "rank 1 took no optimizer step while the others trained: right for a peer that serves them (an RPC parameter "
        "server or observer), else check why it returned early"
    ]


def test_a_smoke_run_without_any_optimizer_step_fails_and_says_what_to_check(tmp_path):
    ranks = {0: {"status": "finished", "steps": 0}, 1: {"status": "finished", "steps": 0}}
    outcome = analyse(make_run(tmp_path, ranks, exit_code=0))
    assert not outcome.passed and outcome.untrained and outcome.root_cause is None
    assert outcome.headline == (
        "no optimizer step was taken: the script ended without calling step() on a torch.optim optimizer"
    )
    fix = failure_fix(outcome)
    assert "needs more GPUs than the smoke run's node has (2 virtual GPUs" in fix and "returns early" in fix
    assert "raise `smoke_processes`" in fix
    summary = format_summary(outcome)
    assert "smoke run FAILED" in summary and "rank 0: 0 steps, the script ended" in summary


def test_no_step_because_mp_spawn_started_no_process_names_it(tmp_path):
    ranks = {
        0: {"status": "finished", "steps": 0, "observed": [protocol.SPAWNED_NOTHING]},
        1: {"status": "finished", "steps": 0, "observed": [protocol.SPAWNED_NOTHING]},
    }
    outcome = analyse(make_run(tmp_path, ranks, exit_code=0))
    assert not outcome.passed
    assert "torch.multiprocessing.spawn(nprocs=0)" in outcome.headline
    assert "mp.spawn was asked for 0 processes" in failure_fix(outcome)


def test_a_full_run_without_steps_is_not_judged_by_them(tmp_path):
    run = make_run(
        tmp_path, {0: {"status": "finished", "steps": 0}, 1: {"status": "finished", "steps": 0}}, exit_code=0
    )
    full = LocalRun(full_plan(run.plan.spec, gpus=0), run.run_dir, 0, 3.0, False)
    assert analyse(full).passed  # evaluation or export scripts train nothing, by design


def test_a_crash_while_python_shuts_down_after_the_script_ended_fails_the_run(tmp_path):
    run = make_run(
        tmp_path,
        {0: {"status": "finished", "steps": 2}, 1: {"status": "finished", "steps": 2}},
        SPAWNED_FAILURES.replace("-11", "-6").replace("SIGSEGV", "SIGABRT"),
    )
    outcome = analyse(run)
    assert not outcome.passed
    assert outcome.headline == "rank 1 was killed by SIGABRT after its script ended, while Python shut down"


def test_a_rank_ending_with_os_exit_zero_passes_when_torchrun_did(tmp_path):
    outcome = analyse(make_run(tmp_path, {0: {"status": "running"}, 1: {"status": "stopped", "steps": 2}}, exit_code=0))
    assert outcome.passed and outcome.ranks[0].status == "finished"


def test_the_runs_directory_can_be_set_from_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv(RUNS_DIR_ENV, str(tmp_path / "runs"))
    assert runs_dir() == tmp_path / "runs"
    monkeypatch.delenv(RUNS_DIR_ENV)
    assert runs_dir().name.startswith("vdk-ml-training-")


def test_a_script_that_spawns_its_workers_is_judged_by_its_workers(tmp_path):
    import dataclasses

    run = make_run(
        tmp_path,
        {
            0: {"status": "stopped", "steps": 2, "last_loss": 0.5},
            1: {
                "status": "failed",
                "steps": 1,
                "ended_at": 5.0,
                "error": {
                    "type": "ValueError",
                    "message": "ValueError: worker broke",
                    "traceback": "Traceback\nValueError",
                },
            },
        },
        exit_code=1,
    )
    plan = dataclasses.replace(run.plan, processes=1, workers=2)
    protocol.write_json_atomically(
        protocol.result_path(run.run_dir, protocol.LAUNCHER),
        {
            "rank": "launcher",
            "status": "failed",
            "steps": 0,
            "ended_at": 9.0,
            "error": {"type": "ProcessRaisedException", "message": "ProcessRaisedException: -- Process 1 terminated"},
        },
    )
    outcome = analyse(LocalRun(plan, run.run_dir, 1, 3.0, False))
    assert not outcome.passed
    assert outcome.headline == "rank 1 failed: ValueError: worker broke"  # the worker, not the launcher after it
    assert [r.rank for r in outcome.ranks] == [0, 1] and outcome.launcher is not None
    summary = format_summary(outcome)
    assert "then the launcher process: ProcessRaisedException: -- Process 1 terminated" in summary
    assert "the launcher process: failed" in summary


def test_the_start_line_does_not_count_workers_from_gpus_and_the_summary_counts_those_spawned(tmp_path):
    import dataclasses

    from vdk.plugin.ml_training.cli.local_summary import format_start

    run = make_run(
        tmp_path, {0: {"status": "finished", "steps": 2}, 1: {"status": "finished", "steps": 2}}, exit_code=0
    )
    plan = dataclasses.replace(run.plan, processes=1, workers=2)
    assert "1 launcher process that spawns its workers, on " in format_start(plan)
    assert "spawning 2 workers" not in format_start(plan)  # the script says how many, not the GPUs
    protocol.write_json_atomically(
        protocol.result_path(run.run_dir, protocol.LAUNCHER),
        {"rank": "launcher", "status": "finished", "steps": 0, "spawned": [2, 2]},  # runtime/cpu_shims.py's record
    )
    summary = format_summary(analyse(LocalRun(plan, run.run_dir, 0, 3.0, False)))
    assert "the launcher process: spawned 4 workers in 2 calls, the script ended" in summary
