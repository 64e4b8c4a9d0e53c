"""The plugin's error types (errors.py): the problem and the fix as fields, where a config error is (file, line,
section, key) as fields too, and no credential in any of them."""

from __future__ import annotations

from pathlib import Path

from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.errors import SettingError

TOKEN = "hf_" + "a" * 34


def test_an_error_is_its_problem_and_its_fix():
    error = MLTrainingError("the registry refused the push", "log in with `podman login`")
    assert (error.problem, error.fix) == ("the registry refused the push", "log in with `podman login`")
    assert str(error) == error.message == "the registry refused the push\nFix: log in with `podman login`"


def test_an_error_without_a_fix_is_its_problem_alone():
    error = MLTrainingError("interrupted")
    assert error.fix == "" and str(error) == "interrupted"


def test_a_config_error_keeps_where_it_is_as_fields_and_says_it_first():
    error = JobConfigError("job/config.ini", "'two' is not a number", "write `nodes = 2`", "ml-training", "nodes", 7)
    assert (error.path, error.line, error.section, error.key) == (Path("job/config.ini"), 7, "ml-training", "nodes")
    assert error.problem == "job/config.ini:7 [ml-training] nodes: 'two' is not a number"
    assert error.fix == "write `nodes = 2`"


def test_a_config_error_names_as_much_of_the_place_as_it_knows():
    assert JobConfigError("c.ini", "p", "f").problem == "c.ini: p"
    assert JobConfigError("c.ini", "p", "f", section="ml-training.env").problem == "c.ini [ml-training.env]: p"


def test_a_setting_error_names_the_key_and_its_environment_variable():
    error = SettingError("ml_training_registry", "'http://r' has a scheme", "leave it out")
    assert error.key == "ml_training_registry"
    assert error.problem == "VDK configuration ml_training_registry (VDK_ML_TRAINING_REGISTRY): 'http://r' has a scheme"
    assert error.fix == "leave it out (in VDK_ML_TRAINING_REGISTRY or `ml_training_registry`)"


def test_no_error_shows_a_credential_whichever_type_carries_it():
    errors = [
        MLTrainingError(f"pull of https://user:secret@hub.example/x failed with {TOKEN}", f"export HF_TOKEN={TOKEN}"),
        JobConfigError("c.ini", f"args hold {TOKEN}", "use [ml-training.secrets]", "ml-training", "args"),
        SettingError("ml_training_registry", "https://user:secret@r.example has a password", "leave it out"),
    ]
    for error in errors:
        for text in (error.problem, error.fix, str(error)):
            assert TOKEN not in text and "secret@" not in text
    assert errors[0].problem.startswith("pull of https://")  # the rest of the text stays
