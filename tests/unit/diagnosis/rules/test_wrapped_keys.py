"""A checkpoint of the DDP-wrapped model loaded into the bare one (or the reverse): the commonest crash of resume
code, named with the fix that fits the direction of the mismatch."""

from tests.support.local_outcomes import make_run
from vdk.plugin.ml_training.diagnosis.rules.wrapped_keys import prefix_mismatch
from vdk.plugin.ml_training.local.outcome import analyse
from vdk.plugin.ml_training.ops.plan_runner import diagnose

SAVED_WRAPPED = (
    'Error(s) in loading state_dict for Sequential:\n\tMissing key(s) in state_dict: "0.weight", "0.bias". \n\t'
    'Unexpected key(s) in state_dict: "module.0.weight", "module.0.bias". '
)
SAVED_BARE = (
    "Error(s) in loading state_dict for DistributedDataParallel:\n\tMissing key(s) in state_dict: "
    '"module.layer.weight". \n\tUnexpected key(s) in state_dict: "layer.weight". '
)


def test_which_side_has_the_wrapper_s_prefix_decides_the_fix():
    assert prefix_mismatch(SAVED_WRAPPED) == ("module.", True)
    assert prefix_mismatch(SAVED_BARE) == ("module.", False)
    compiled = SAVED_WRAPPED.replace("module.", "_orig_mod.")
    assert prefix_mismatch(compiled) == ("_orig_mod.", True)
    # keys that differ otherwise (another model): not this rule's
    other = SAVED_WRAPPED.replace("module.0.weight", "head.weight").replace("module.0.bias", "x")
    assert prefix_mismatch(other) is None
    assert prefix_mismatch('Missing key(s) in state_dict: "0.weight". ') is None


def test_a_rank_that_loaded_the_wrapped_model_s_keys_into_the_bare_one_gets_the_fix(tmp_path):
    error = {"type": "RuntimeError", "message": f"RuntimeError: {SAVED_WRAPPED}", "traceback": "Traceback ...\n"}
    run = make_run(tmp_path, {0: {"status": "failed", "ended_at": 1.0, "error": error}, 1: {"status": "stopped"}})
    finding = diagnose(analyse(run))
    assert "saved from the wrapped model (its keys start with `module.`)" in finding.fix
    assert 'consume_prefix_in_state_dict_if_present(state, "module.")' in finding.fix
    assert "model.module.state_dict()" in finding.fix and finding.fix.endswith("again")
