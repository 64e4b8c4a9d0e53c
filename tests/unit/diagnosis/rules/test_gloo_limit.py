"""A collective gloo lacks: a limit of the smoke run's CPU check, named as one beside the traceback and in
the fix."""

from tests.support.local_outcomes import make_run
from vdk.plugin.ml_training.cli.local_summary import format_summary
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.ops.plan_runner import diagnose

PREMUL_SUM = {
    "type": "RuntimeError",
    "message": "RuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo",
    "traceback": "Traceback ...\nRuntimeError: Cannot use ReduceOp.PREMUL_SUM with Gloo\n",
}


def test_a_reduce_op_gloo_lacks_is_a_note_beside_the_traceback_and_the_fix(tmp_path):
    run = make_run(tmp_path, {0: {"status": "failed", "ended_at": 1.0, "error": PREMUL_SUM}, 1: {"status": "stopped"}})
    outcome = analyse(run)
    finding = diagnose(outcome)
    limit = (
        "ReduceOp.PREMUL_SUM is not available in gloo, the CPU backend that stands in for NCCL in the smoke run: "
        "this is a limit of the CPU check, not a bug in your code"
    )
    assert finding.hints == [limit]
    assert finding.fix.startswith(f"{limit}. Narrowest switch: keep the call out of smoke runs, `if os.environ")
    assert (
        "VDK_ML_TRAINING_MODE=smoke" in finding.fix and "`vdk deploy --skip-smoke` skips the whole check" in finding.fix
    )
    assert f"\n\nnote: {limit}\n" in format_summary(outcome, finding)
    assert "note:" not in format_summary(outcome)  # without the diagnosis, nothing is noted
