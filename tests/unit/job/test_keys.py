"""The catalogue of keys (job/keys.py) is the one list: load_job_spec reads exactly its keys, each fills a field of
the spec, WHERE_IT_RUNS and the VDK settings are derived from it, and its Markdown tables name every key."""

import dataclasses
import re

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.job import CATALOGUE
from vdk.plugin.ml_training.job import DEFAULT_BASE_IMAGE
from vdk.plugin.ml_training.job import KEYS
from vdk.plugin.ml_training.job import WHERE_IT_RUNS
from vdk.plugin.ml_training.job import MLJobSpec
from vdk.plugin.ml_training.job import backend_choices
from vdk.plugin.ml_training.job import key_table
from vdk.plugin.ml_training.job import keys
from vdk.plugin.ml_training.job import load
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.job import teams
from vdk.plugin.ml_training.job.settings import CONFIG_KEYS
from vdk.plugin.ml_training.job.settings import job_settings

JOB_KEYS = [key for key in CATALOGUE if key.scope == keys.JOB]
# Kinds a spec holds in another form than written (seconds, a bool, a list, an int, a mapping).
HELD_OTHERWISE = (
    keys.DURATION,
    keys.BOOLEAN,
    keys.ARGUMENTS,
    keys.PACKAGES,
    keys.INTEGER,
    keys.LABELS,
    keys.TOLERATIONS,
)
HELD_OTHERWISE += (keys.NAMES, keys.DATA_PATHS)
# MLJobSpec's fields that no single [ml-training] key fills.
NOT_FROM_A_KEY = {
    "name",
    "job_dir",
    "team",
    "env",
    "spawns_workers",
    "mounts",
    "secrets",
    "sweep",
    "origins",
    "overrides",
    "data",
    "_base_reference",  # base_image, parsed
    "vdk_section",  # the plugin's [vdk] keys read with the spec, for the settings a verb reads after it
}


@pytest.fixture
def readers(monkeypatch):
    """Every KeyReader load_job_spec makes, to see which keys it asked for."""
    made = []

    class Recording(load.KeyReader):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(load, "KeyReader", Recording)
    return made


def every_key_set(tmp_path):
    # smoke_data's example names a dataset: the job has it
    data = "[ml-training.data]\ndata/train = s3://vision-data/train\n"
    return write_job(tmp_path, "every-key", ml={key.name: key.example for key in JOB_KEYS}, extra=data)


def test_a_job_that_sets_every_catalogue_key_to_its_example_loads_and_is_read_key_by_key(tmp_path, readers):
    spec = load_job_spec(every_key_set(tmp_path))
    assert readers[0].asked == set(KEYS)
    values = spec.to_dict()
    for key in JOB_KEYS:
        if key.kind in HELD_OTHERWISE:
            continue  # held in another form than written (seconds, a bool, a list, an int, a mapping)
        assert str(values[key.field]) == key.example, key.name


def test_a_job_that_sets_no_key_still_asks_for_every_one(tmp_path, readers):
    load_job_spec(write_job(tmp_path))
    assert readers[0].asked == set(KEYS)


def test_every_key_fills_a_field_of_the_spec_and_every_other_field_is_known():
    fields = {f.name for f in dataclasses.fields(MLJobSpec)}
    from_keys = {key.field for key in JOB_KEYS}
    assert from_keys <= fields
    assert fields - from_keys == NOT_FROM_A_KEY


def test_where_it_runs_is_derived_from_the_catalogue_and_is_what_it_was():
    assert WHERE_IT_RUNS == {key.field for key in CATALOGUE if key.where_it_runs}
    assert WHERE_IT_RUNS == {
        "registry", "namespace", "queue", "kube_context", "backend", "smoke_steps", "smoke_processes",
        "smoke_timeout_seconds", "smoke_device_tracking", "stall_timeout_seconds", "startup_timeout_seconds",
        "smoke_args", "smoke_epoch_end", "import_check", "requirements_overlay", "output_pvc", "data_cache_pvc",
        # how requirements.txt's packages are looked up (the image says what they are)
        "index_strategy",
        "smoke_data", "smoke_sample_files", "smoke_sample_size", "gpu_sample_period_seconds", "idle_timeout_seconds",
        # how a run restarts and how its smoke run checks that (not what trains)
        "resume", "termination_grace_period_seconds", "smoke_resume",
        # placement: which nodes, taints, pull secrets and service account (not what trains, not the image)
        "gpu_type", "gpu_type_label", "node_selector", "tolerations", "image_pull_secrets", "service_account",
        # what is attached to the pushed image, not what is in it
        "attestations",
        # whether a scheduled execution through the Control Service starts a run, not what it trains
        "if_changed",
        # where its series are logged, not what it trains
        "mlflow_tracking_uri",
    }  # fmt: skip


def test_the_keys_are_listed_in_the_order_users_know():
    assert list(KEYS)[:4] == ["entrypoint", "args", "nodes", "gpus_per_node"]
    assert list(KEYS)[-6:] == [
        "registry", "namespace", "kube_context", "output_pvc", "data_cache_pvc", "mlflow_tracking_uri"
    ]  # fmt: skip
    assert len(KEYS) == len(set(KEYS)) == 52


def test_the_vdk_settings_are_derived_from_the_catalogue_and_are_what_they_were():
    assert set(CONFIG_KEYS) == {key.setting_name for key in CATALOGUE if key.is_setting}
    defaults = {name: default for name, (default, _) in CONFIG_KEYS.items()}
    assert defaults == {
        "ml_training_registry": None,
        "ml_training_namespace": None,
        "ml_training_kube_context": None,
        "ml_training_team_namespaces": None,
        "ml_training_team_queues": None,
        "ml_training_output_pvc": None,
        "ml_training_data_cache_pvc": None,
        "ml_training_base_image": None,
        "ml_training_smoke_timeout": "10m",
        "ml_training_stall_timeout": "30m",
        "ml_training_startup_timeout": "1h",
        "ml_training_idle_timeout": "0s",
        "ml_training_run_mode": "smoke",
        "ml_training_container_engine": None,
        "ml_training_container_run_options": None,
        # placement every run of a cluster may need (the job's keys win)
        "ml_training_gpu_type_label": None,
        "ml_training_node_selector": None,
        "ml_training_tolerations": None,
        "ml_training_image_pull_secrets": None,
        "ml_training_service_account": None,
        # SBOM and provenance attached to pushed images (off for a registry that refuses artifacts)
        "ml_training_attestations": None,
        # the VDK Control Service: the entry its operator set up, and the launcher's switch in its data-job pods
        "ml_training_control_service_entry": "ml-training",
        "ml_training_launcher": "False",
        # the MLflow server runs are logged to
        "ml_training_mlflow_tracking_uri": None,
    }
    assert CONFIG_KEYS["ml_training_registry"][1].startswith("OCI registry (and path) that ml-training job images")
    # the settings of a job's keys have the key's name; the others are settings of `vdk`, not of a job
    assert {k.name for k in CATALOGUE if k.scope != keys.JOB} == {
        "team_namespaces", "team_queues", "run_mode", "container_engine", "container_run_options",
        "control_service_entry", "launcher",
    }  # fmt: skip


def test_the_example_of_every_setting_is_accepted(tmp_path):
    examples = {key.name: key.example for key in CATALOGUE if key.is_setting}
    for key in (teams.TEAM_NAMESPACES, teams.TEAM_QUEUES):
        assert teams.mapping(examples, key).teams() == ["vision", "nlp"]

    class Configuration:
        def get_value(self, name):
            return examples.get(name.removeprefix("ml_training_"))

    settings = job_settings(Configuration())
    assert "run_mode" not in settings and "container_engine" not in settings  # settings of `vdk`, not of a job
    spec = load_job_spec(write_job(tmp_path), settings)
    assert (spec.registry, spec.namespace, spec.output_pvc) == ("registry.example.com/ml", "ml-team", "ml-outputs")
    assert spec.base_image == DEFAULT_BASE_IMAGE and spec.smoke_timeout_seconds == 15 * 60


def test_the_job_keys_table_names_every_key_with_its_meaning_default_and_verbs():
    table = key_table.job_keys_table()
    lines = table.splitlines()
    assert lines[0] == "| key | meaning | default | used by |" and lines[1] == "|---|---|---|---|"
    assert re.findall(r"^\| `([a-z_]+)` \|", table, re.M) == list(KEYS)
    row = {re.match(r"^\| `([a-z_]+)`", line).group(1): line for line in lines[2:]}
    assert row["memory"] == "| `memory` | memory per node, a Kubernetes quantity | `16Gi` | `vdk deploy` |"
    assert "| `7d` |" in row["ttl_after_finished"] and "| `true` |" in row["import_check"]
    assert "`VDK_ML_TRAINING_REGISTRY`, else none" in row["registry"]
    assert "`vdk run`, `vdk deploy`" in row["nodes"]


def test_the_backend_key_lists_the_registered_backends_without_naming_them_in_the_catalogue():
    assert "pytorchjob" not in keys.key("backend").meaning
    row = next(line for line in key_table.job_keys_table().splitlines() if line.startswith("| `backend` |"))
    assert "one of " + ", ".join(f"`{name}`" for name in backend_choices()) in row


def test_the_settings_table_names_every_vdk_setting_and_its_variable():
    table = key_table.settings_table()
    assert table.splitlines()[0] == "| VDK key | environment variable | meaning | default | used by |"
    assert re.findall(r"^\| `(ml_training_[a-z_]+)` \| `(VDK_ML_TRAINING_[A-Z_]+)` \|", table, re.M) == [
        (key.setting_name, key.variable) for key in CATALOGUE if key.is_setting
    ]
    assert set(re.findall(r"^\| `(ml_training_[a-z_]+)`", table, re.M)) == set(CONFIG_KEYS)


def test_the_spec_s_defaults_are_the_catalogue_s():
    fields = {f.name: f for f in dataclasses.fields(MLJobSpec)}
    compared = 0
    for key in CATALOGUE:
        field = fields.get(key.field)
        if field is None or field.default is dataclasses.MISSING or key.default is None:
            continue  # no default, or one the reader computes (default_text says which)
        assert field.default == key.default, f"MLJobSpec.{key.field} defaults to {field.default!r}, not the catalogue's"
        compared += 1
    assert compared >= 10  # the six that were copies among them
    from vdk.plugin.ml_training.runtime import watchdog

    assert keys.default_of("stall_timeout") == watchdog.DEFAULT_STALL_SECONDS  # what the pods fall back to
    assert keys.variable("namespace") == "VDK_ML_TRAINING_NAMESPACE" == keys.key("namespace").variable
