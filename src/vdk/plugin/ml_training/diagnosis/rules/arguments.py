"""The script's argument parser refused the arguments of [ml-training] (`args`, `smoke_args`)."""

from __future__ import annotations

import shlex

from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.finding import Finding
from vdk.plugin.ml_training.diagnosis.finding import local_failure
from vdk.plugin.ml_training.diagnosis.finding import reported_error
from vdk.plugin.ml_training.runtime import protocol


def arguments_refused(evidence: Evidence) -> Finding | None:
    reported = reported_error(evidence)
    if reported is None or not reported[2].get("arguments"):
        return None
    local = reported[0]
    spec = local.spec
    smoke = local.mode == protocol.SMOKE
    key = spec.arguments_key(smoke)
    given = shlex.join(spec.arguments(smoke)) or "(none)"
    return local_failure(
        evidence,
        f"the script's argument parser refused its arguments: `{key} = {given}` in [ml-training] of "
        f"{spec.config_path}. Correct them (or the parser), then {local.again}",
    )
