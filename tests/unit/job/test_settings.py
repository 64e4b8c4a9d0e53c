"""One precedence for the plugin's VDK settings: the environment, else [vdk] of the job's config.ini, else the
default; read from vdk-core's own Configuration, as the verbs get it."""

from __future__ import annotations

import pytest
from vdk.internal.core.config import ConfigurationBuilder

from tests.support.jobs import write_job
from vdk.plugin.ml_training.errors import JobConfigError
from vdk.plugin.ml_training.job.settings import CONFIG_KEYS
from vdk.plugin.ml_training.job.settings import job_settings
from vdk.plugin.ml_training.job.settings import setting

pytestmark = pytest.mark.usefixtures("isolated_environment")


def configuration(**values: str):
    """VDK's configuration with the plugin's keys, `values` set as the environment provider sets them."""
    builder = ConfigurationBuilder()
    for key, (default, description) in CONFIG_KEYS.items():
        builder.add(key, default, True, description)
    for key, value in values.items():
        builder.set_value(key, value)
    return builder.build()


def test_the_environment_then_the_vdk_section_then_the_default(tmp_path, monkeypatch):
    job = write_job(tmp_path, extra="\n[vdk]\nml_training_namespace = from-vdk\nml_training_smoke_timeout = 5m\n")
    assert setting(configuration(), "ml_training_namespace", job)[0] == "from-vdk"
    assert setting(configuration(), "ml_training_smoke_timeout", job)[0] == "5m"  # over a non-empty default
    assert setting(configuration(), "ml_training_namespace", None) == (None, None)
    assert setting(configuration(), "ml_training_stall_timeout", job) == ("30m", None)
    monkeypatch.setenv("VDK_ML_TRAINING_NAMESPACE", "from-env")
    value, origin = setting(configuration(ml_training_namespace="from-env"), "ml_training_namespace", job)
    assert (value, origin) == ("from-env", "VDK_ML_TRAINING_NAMESPACE")


def test_a_vdk_section_taken_already_is_used_and_config_ini_is_not_read_again(tmp_path, monkeypatch):
    from vdk.plugin.ml_training.job.load import load_job_spec

    job = write_job(tmp_path, extra="\n[vdk]\nml_training_run_mode = full\n")
    spec = load_job_spec(job)
    assert spec.vdk_settings == {"ml_training_run_mode": "full"}
    (job / "config.ini").unlink()  # what the spec carries is what counts: nothing reads the file again
    assert setting(configuration(), "ml_training_run_mode", job, spec.vdk_settings)[0] == "full"
    monkeypatch.setenv("VDK_ML_TRAINING_RUN_MODE", "container")  # the environment still comes first
    chosen = configuration(ml_training_run_mode="container")
    assert setting(chosen, "ml_training_run_mode", job, spec.vdk_settings) == ("container", "VDK_ML_TRAINING_RUN_MODE")


def test_vdk_core_s_own_reading_of_the_vdk_section_is_named_as_such(tmp_path):
    """Under `vdk run JOB` vdk-core has already put [vdk] into its configuration."""
    job = write_job(tmp_path, extra="\n[vdk]\nml_training_registry = 127.0.0.1:5000/ml\n")
    settings = job_settings(configuration(ml_training_registry="127.0.0.1:5000/ml"), job)
    assert settings["registry"] == "127.0.0.1:5000/ml"
    assert settings.origins["registry"] == f"[vdk] ml_training_registry of {job / 'config.ini'}"


def test_empty_values_count_as_not_set(tmp_path, monkeypatch):
    job = write_job(tmp_path, extra="\n[vdk]\nml_training_namespace = from-vdk\nml_training_registry =\n")
    monkeypatch.setenv("VDK_ML_TRAINING_NAMESPACE", "")
    settings = job_settings(configuration(ml_training_namespace=""), job)
    assert settings["namespace"] == "from-vdk" and "registry" not in settings


def test_an_unknown_plugin_key_in_the_vdk_section_is_an_error(tmp_path):
    job = write_job(tmp_path, extra="\n[vdk]\nml_training_regsitry = x\nsome_other_plugin_key = y\n")
    with pytest.raises(JobConfigError) as error:
        job_settings(configuration(), job)
    assert "[vdk] ml_training_regsitry: unknown VDK configuration key" in error.value.message
    assert "did you mean `ml_training_registry`?" in error.value.message


def test_a_plugin_key_with_its_prefix_misspelt_is_an_error_and_other_plugins_keys_are_not(tmp_path):
    job = write_job(tmp_path / "a", extra="\n[vdk]\nml_trainig_registry = x\n")
    with pytest.raises(JobConfigError) as error:
        job_settings(configuration(), job)
    assert "[vdk] ml_trainig_registry: unknown VDK configuration key" in error.value.message
    assert "did you mean `ml_training_registry`?" in error.value.message
    other = write_job(tmp_path / "b", extra="\n[vdk]\ningest_method_default = file\nlog_level_vdk = DEBUG\n")
    assert "registry" not in job_settings(configuration(), other)
