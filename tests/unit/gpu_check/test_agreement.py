"""The agreement of the smoke check's verdict with the real GPU's (functional_tests/gpu/agreement.py): both pass or
both fail at the same place agree; a difference is listed with its cause, the smoke check's own word for a
limit first, then the case's catalogue, else "unexplained"."""

from __future__ import annotations

from functional_tests.gpu import agreement
from functional_tests.gpu.agreement import Verdict

from vdk.plugin.ml_training.diagnosis.rules.gloo_limit import gloo_limit

PASS = Verdict(True)


def fail(where: str | None = "train.py:12", limit: str = "") -> Verdict:
    return Verdict(False, where=where, error="RuntimeError: boom", limit=limit)


def test_both_pass_or_both_fail_at_the_same_line_agree():
    assert agreement.compare(PASS, PASS) == agreement.Agreement(agreement.AGREE, "both pass")
    same = agreement.compare(fail(), fail())
    assert same.outcome == agreement.AGREE and same.summary == "both fail at train.py:12" and same.explained


def test_failures_at_different_lines_disagree_and_say_both_lines():
    found = agreement.compare(fail("train.py:12"), fail("train.py:9"))
    assert found.outcome == agreement.DISAGREE
    assert found.summary == "both fail, the smoke check at train.py:12, the GPU at train.py:9"
    assert found.cause == agreement.UNEXPLAINED and not found.explained


def test_a_verdict_the_other_side_does_not_share_is_a_disagreement_with_its_cause():
    missed = agreement.compare(PASS, fail("train.py:7"), known_cause="")
    assert missed.outcome == agreement.DISAGREE and missed.summary == "smoke passes, GPU fail at train.py:7"
    assert not missed.explained
    expected = agreement.compare(fail(), PASS, known_cause="one GPU here")
    assert expected.summary == "smoke fail at train.py:12, GPU passes" and expected.cause == "one GPU here"
    assert expected.explained


def test_the_smoke_check_s_own_word_for_a_limit_explains_the_difference_first():
    limit = "ReduceOp.PREMUL_SUM is not available in gloo"
    found = agreement.compare(fail(limit=limit), PASS, known_cause="the catalogue's word")
    assert found.outcome == agreement.DISAGREE
    assert found.cause == f"the smoke check names it a limit of itself, not a bug in the code: {limit}"


def test_both_failing_with_the_line_known_on_one_side_only_is_said_as_such():
    found = agreement.compare(fail(None), fail("train.py:6"), known_cause="argparse exits")
    assert found.outcome == agreement.AGREE_VERDICT
    assert found.summary == "both fail (the smoke check names no line of the job)" and found.cause == "argparse exits"
    unknown = agreement.compare(fail("train.py:6"), fail(None))
    assert unknown.cause == "the GPU run failed outside the job's code: RuntimeError: boom" and unknown.explained


def test_a_run_without_a_verdict_is_not_compared():
    found = agreement.compare(Verdict(None, note="no GPU on this machine"), PASS)
    assert found.outcome == agreement.NOT_COMPARED and found.summary == "smoke: no GPU on this machine"


def test_the_tally_counts_each_outcome_and_what_nothing_explains():
    results = [
        agreement.compare(PASS, PASS),
        agreement.compare(PASS, fail()),
        agreement.compare(fail(), PASS, "known"),
        agreement.compare(Verdict(None), PASS),
    ]
    assert agreement.tally(results) == {
        agreement.AGREE: 1,
        agreement.AGREE_VERDICT: 0,
        agreement.DISAGREE: 2,
        agreement.NOT_COMPARED: 1,
        agreement.UNEXPLAINED: 1,
    }


def test_where_a_traceback_ends_in_the_job_s_own_files():
    text = (
        "Traceback (most recent call last):\n"
        '  File "/jobs/my-job/train.py", line 40, in <module>\n'
        '  File "/jobs/my-job/lib/model.py", line 7, in forward\n'
        '  File "/usr/lib/python3/site-packages/torch/nn/modules/linear.py", line 125, in forward\n'
        "RuntimeError: Expected all tensors to be on the same device\n"
    )
    assert agreement.where_in_traceback(text, "/jobs/my-job") == "lib/model.py:7"
    assert agreement.where_in_traceback(text, "/elsewhere") is None
    copy = text.replace("/jobs/my-job/", "/tmp/run/work/")
    assert agreement.where_in_traceback(copy, "/jobs/my-job", "/tmp/run/work") == "lib/model.py:7"


def test_where_the_import_check_says_the_missing_import_is():
    finding = "train.py imports 1 module its image would not have:\n  train.py:3: `import yaml` needs PyYAML"
    assert agreement.where_in_import_check(finding) == "train.py:3"
    assert agreement.where_in_import_check("no such thing") is None


def test_a_limit_the_smoke_check_names_is_read_from_its_own_words():
    said = gloo_limit({"message": "Cannot use ReduceOp.PREMUL_SUM with Gloo"})
    assert agreement.limit_named(f"rank 0 failed\nFix: {said}. Narrowest switch: ...") == "ReduceOp.PREMUL_SUM"
    gap = "note: CUDA graphs (torch.cuda.CUDAGraph) cannot run on the smoke run's virtual GPUs (CPU kernels, gloo for "
    gap += "NCCL): this is a limit of the smoke check, not a bug in your code"
    assert agreement.limit_named(gap) == "CUDA graphs (torch.cuda.CUDAGraph)"
    assert agreement.limit_named("RuntimeError: Expected all tensors to be on the same device") == ""


def test_a_verdict_travels_as_json_and_reads_back():
    verdict = Verdict(False, where="train.py:3", error="ModuleNotFoundError: No module named 'yaml'", seconds=1.5)
    assert Verdict.from_dict({**verdict.to_dict(), "unknown": 1}) == verdict
    assert verdict.label == "fail at train.py:3" and Verdict(None, note="x").label == "no verdict (x)"
