"""Code that needs a GPU, run in full on a machine without one: the fix names the setting that trains it here on
CPU (VDK_ML_TRAINING_ADAPT_TO_CPU=1), beside a deploy and the smoke run."""

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.diagnosis.evidence import Blame
from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.rules.needs_gpu import needs_a_gpu
from vdk.plugin.ml_training.job import load_job_spec


def evidence(tmp_path, message: str, mode: str = "full", gpus: int = 0) -> Evidence:
    spec = load_job_spec(write_job(tmp_path))
    rank = RankEvidence("0", "rank 0", 0, error={"type": "RuntimeError", "message": message, "traceback": ""})
    facts = LocalFacts(spec=spec, mode=mode, headline="rank 0 failed", again="run it again", gpus=gpus)
    return Evidence((rank,), Blame(rank, None), local=facts)


@pytest.mark.parametrize(
    "message",
    [
        "AssertionError: Torch not compiled with CUDA enabled",
        "ValueError: Distributed package doesn't have NCCL built in",
        "ValueError: Your setup doesn't support bf16/gpu.",
        "ValueError: fp16 mixed precision requires a GPU (not 'mps').",
    ],
)
def test_gpu_code_in_a_full_run_without_gpus_names_the_cpu_setting(tmp_path, message):
    finding = needs_a_gpu(evidence(tmp_path, message))
    job = tmp_path / "my-job"
    assert finding is not None
    assert f"`VDK_ML_TRAINING_ADAPT_TO_CPU=1 vdk run --full {job}`" in finding.fix
    assert f"`vdk deploy -p {job}`" in finding.fix and f"`vdk run {job}`" in finding.fix


def test_a_smoke_run_or_a_machine_with_gpus_is_another_story(tmp_path):
    assert needs_a_gpu(evidence(tmp_path / "a", "CUDA error", mode="smoke")) is None
    assert needs_a_gpu(evidence(tmp_path / "b", "CUDA error", gpus=2)) is None
    assert needs_a_gpu(evidence(tmp_path / "c", "ValueError: bad shape")) is None


@pytest.mark.parametrize(
    "message",
    [
        "RuntimeError: Torch not compiled with CUDA enabled",  # a library that needs CUDA itself
        "RuntimeError: Backend gloo does not support reduce_scatter_tensor_coalesced",
    ],
)
def test_a_full_run_on_cpu_is_never_told_of_a_smoke_check_it_did_not_run(tmp_path, message):
    from dataclasses import replace

    from vdk.plugin.ml_training.diagnosis.engine import why_failed

    full = why_failed(evidence(tmp_path / "a", message))
    assert full is not None
    said = " ".join([full.what, full.fix or "", *full.hints])
    assert "limit of the smoke check" not in said and "limit of the CPU check" not in said  # no virtual GPU was used
    assert "stand in" not in said
    adapted = evidence(tmp_path / "b", message)
    assert adapted.local is not None
    adapted = replace(adapted, local=replace(adapted.local, adapted=True))  # VDK_ML_TRAINING_ADAPT_TO_CPU=1
    notes = why_failed(adapted).hints
    assert notes and all("VDK_ML_TRAINING_ADAPT_TO_CPU=1" in note and "smoke check" not in note for note in notes)
    smoke = why_failed(evidence(tmp_path / "c", message, mode="smoke"))
    assert any("a limit of the" in part and "smoke" in part for part in [smoke.fix or "", *smoke.hints])
