"""The words of the wire: every kind of line starts with the prefix, is one of its own, and a failure's problem and
fix come back as they were written."""

from __future__ import annotations

from vdk.plugin.ml_training.vocabulary import wire


def kinds() -> dict[str, str]:
    return {name: value for name, value in vars(wire).items() if name.isupper() and name not in _NOT_KINDS}


_NOT_KINDS = {"PROJECT", "PREFIX", "FIX", "TERMINATION_LOG", "TERMINATION_MAX_BYTES", "ENV_PREFIX"}


def test_each_kind_of_line_has_a_word_of_its_own():
    words = list(kinds().values())
    assert len(words) == len(set(words)) > 10
    assert all(wire.mark(word).startswith("[vdk-ml-training] ") for word in words)
    assert wire.line(wire.PROGRESS, "step=1") == "[vdk-ml-training] progress step=1"
    assert wire.warning("no GPU") == "[vdk-ml-training] warning: no GPU"
    assert wire.is_ours(wire.error("x")) and not wire.is_ours("loss=0.1 [vdk-ml-training]")


def test_a_problem_and_its_fix_come_back_as_written():
    text = wire.with_fix("the bucket is gone", "create it\nthen deploy again")
    assert text == "the bucket is gone\nFix: create it\nthen deploy again"
    assert wire.split_fix(text) == ("the bucket is gone", "create it\nthen deploy again")
    assert wire.with_fix("no fix", "") == "no fix" and wire.split_fix("no fix") == ("no fix", "")


def test_a_setting_s_variable_follows_vdk_s_rule():
    assert wire.setting_variable("ml_training_registry") == "VDK_ML_TRAINING_REGISTRY"
    assert wire.setting_variable("ml_training_registry").startswith(wire.ENV_PREFIX)


def test_a_line_s_words_are_read_wherever_it_stands_and_only_for_its_own_kind():
    logged = "2026-01-02T03:04:05Z rank0 | " + wire.line(wire.PROGRESS, "step=12/100 loss=0.5 a=b=c note")
    assert wire.fields(logged, wire.PROGRESS) == {"step": "12/100", "loss": "0.5", "a": "b=c"}
    assert wire.fields(wire.line(wire.METRIC_NAMES, "loss,acc"), wire.METRIC) is None  # another kind's line
    assert wire.fields("step=12 loss=0.5", wire.PROGRESS) is None  # the words without the mark: not ours
    assert wire.fields(wire.line(wire.GPU, ""), wire.GPU) == {}
