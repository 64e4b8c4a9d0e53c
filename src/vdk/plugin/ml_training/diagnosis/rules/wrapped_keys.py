"""A checkpoint of a wrapped model loaded into the bare one, or the reverse: DDP (and `torch.compile`, DataParallel)
prefix every key of a state dict (`module.`, `_orig_mod.`), so `load_state_dict` of the other one finds none of its
keys. The commonest crash of resume code: it runs only when a run restarts, so nothing runs it before a preemption
but the smoke run's resume check."""

from __future__ import annotations

import re

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error

PREFIXES = ("module.", "_orig_mod.")
_MISSING = re.compile(r"Missing key\(s\) in state_dict: (.*?)(?:\.\s*$|\.\s+Unexpected|$)", re.S)
_UNEXPECTED = re.compile(r"Unexpected key\(s\) in state_dict: (.*?)(?:\.\s*$|$)", re.S)


def wrapped_keys(evidence: Evidence) -> Finding | None:
    reported = reported_error(evidence)
    if reported is None:
        return None
    local, _, error = reported
    found = prefix_mismatch(str(error.get("message", "")))
    if found is None:
        return None
    prefix, saved_wrapped = found
    if saved_wrapped:
        how = (
            f"the checkpoint was saved from the wrapped model (its keys start with `{prefix}`) and is loaded into the "
            f"bare model: save `model.module.state_dict()` (the bare model's), or load with "
            f'`torch.nn.modules.utils.consume_prefix_in_state_dict_if_present(state, "{prefix}")` first'
        )
    else:
        how = (
            f"the checkpoint holds the bare model's keys and is loaded into the wrapped model (whose keys start with "
            f"`{prefix}`): load into `model.module`, or save and load the same one"
        )
    return local_failure(evidence, f"{how}; then {local.again}")


def prefix_mismatch(message: str) -> tuple[str, bool] | None:
    """(the prefix, whether the checkpoint has it) when `load_state_dict`'s keys differ only by a wrapper's prefix."""
    missing = _keys(_MISSING, message)
    unexpected = _keys(_UNEXPECTED, message)
    if not missing or not unexpected:
        return None
    for prefix in PREFIXES:
        if {prefix + k for k in missing} & set(unexpected):
            return prefix, True
        if {prefix + k for k in unexpected} & set(missing):
            return prefix, False
    return None


def _keys(pattern: re.Pattern[str], message: str) -> list[str]:
    match = pattern.search(message)
    return re.findall(r'"([^"]+)"', match.group(1)) if match else []
