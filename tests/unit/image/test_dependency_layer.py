"""The dependency layer before anything is resolved: a requirements.txt that asks for nothing (comments and
blank lines) gives no layer; a GPU job's layer adds the NVML binding unless it has it already.
(Real uv resolving wheels: tests/integration/image/test_dependency_layer_uv.py.)"""

from __future__ import annotations

import json
import os

from tests.support.jobs import write_job
from vdk.plugin.ml_training.dependencies import uv_install
from vdk.plugin.ml_training.image import dependency_layer
from vdk.plugin.ml_training.image import layer_inputs
from vdk.plugin.ml_training.image import layer_tarball
from vdk.plugin.ml_training.image.base_facts import base_info
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.job import load_job_spec

PYTORCH_BASE = "pytorch/pytorch:2.13.0-cuda13.0-cudnn9-runtime"


def job_with(tmp_path, requirements, gpus="0"):
    """A job whose requirements.txt asks for `requirements` (nothing is resolved by these tests)."""
    files = {"train.py": "if __name__ == '__main__':\n    pass\n", "requirements.txt": requirements}
    # a CPU job: a job that asks for GPUs also gets the NVML binding (test_nvml_binding_* below)
    ml = f"base_image = {PYTORCH_BASE}\ngpus_per_node = {gpus}\n"
    return load_job_spec(write_job(tmp_path, "job", ml=ml, files=files))


def test_no_requirements_no_layer(tmp_path):
    spec = job_with(tmp_path, "# nothing yet\n\n")
    assert dependency_layer.dependency_layer(spec, base_info(spec), Progress()) is None


# --- the data step's tools ---------------------------------------------------------------------------------------


def spec_of(tmp_path, data: str = "", requirements: str | None = None):
    files = {"train.py": "print(1)\n", **({"requirements.txt": requirements} if requirements is not None else {})}
    extra = f"[ml-training.data]\n{data}\n" if data else ""
    return load_job_spec(write_job(tmp_path, "job", files=files, extra=extra))


def test_the_tools_follow_the_schemes_the_job_uses(tmp_path):
    assert layer_inputs.data_tools(spec_of(tmp_path / "a")) == []
    assert layer_inputs.data_tools(spec_of(tmp_path / "b", "/data = pvc:imagenet")) == []
    s3 = layer_inputs.data_tools(spec_of(tmp_path / "c", "data = s3://bucket/x"))
    both = layer_inputs.data_tools(spec_of(tmp_path / "d", "data = s3://bucket/x\ntok = hf://datasets/org/t"))
    assert [t.split(">")[0] for t in s3] == ["boto3"]
    assert [t.split(">")[0] for t in both] == ["huggingface_hub", "boto3"] or [t.split(">")[0] for t in both] == [
        "boto3",
        "huggingface_hub",
    ]


def test_a_job_with_data_but_no_requirements_still_gets_a_layer_and_the_tools_change_its_key(tmp_path):
    assert layer_inputs.layer_input(spec_of(tmp_path / "a")) is None
    only_data = layer_inputs.layer_input(spec_of(tmp_path / "b", "data = s3://bucket/x"))
    assert only_data is not None and b"boto3" in only_data
    plain = layer_inputs.layer_input(spec_of(tmp_path / "c", requirements="numpy\n"))
    with_data = layer_inputs.layer_input(spec_of(tmp_path / "d", "data = s3://bucket/x", requirements="numpy\n"))
    assert plain == b"numpy\n" and with_data.startswith(b"numpy\n") and with_data != plain


def test_a_layer_cached_for_other_package_index_settings_is_not_taken(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://user:s3cret@one.example.com/simple")
    spec, base, entry = cached_entry(tmp_path, monkeypatch)  # cached for these settings
    key = entry.name
    assert dependency_layer.cached_layer(spec, base).cache_key == key
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://two.example.com/simple")
    assert dependency_layer.cached_layer(spec, base) is None
    (spec.job_dir / "uv.toml").write_text("[[index]]\nurl = 'https://three.example.com/simple'\n")
    monkeypatch.setenv("UV_DEFAULT_INDEX", "https://user:s3cret@one.example.com/simple")
    assert dependency_layer.cached_layer(spec, base) is None  # uv reads the job directory's uv.toml too
    (spec.job_dir / "uv.toml").unlink()
    assert dependency_layer.cached_layer(spec, base).cache_key == key
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file() and b"s3cret" in p.read_bytes()]


# --- the NVML binding of the GPU sampler ------------------------------------------------------------------


def test_nvml_binding_is_added_for_a_job_that_asks_for_gpus_and_samples_them(tmp_path):
    from importlib import metadata

    wanted = (f"nvidia-ml-py=={metadata.version('nvidia-ml-py')}",)
    gpu = job_with(tmp_path / "gpu", "tinydep\n", gpus="8")
    assert layer_inputs.extra_requirements(gpu, base_info(gpu)) == wanted
    mig = job_with(tmp_path / "mig", "tinydep\n", gpus="1g.10gb")
    assert layer_inputs.extra_requirements(mig, base_info(mig)) == wanted
    cpu = job_with(tmp_path / "cpu", "tinydep\n", gpus="0")
    assert layer_inputs.extra_requirements(cpu, base_info(cpu)) == ()


def test_nvml_binding_is_left_to_the_base_or_to_requirements_that_name_it(tmp_path):
    named = job_with(tmp_path / "named", "pynvml>=11 ; sys_platform == 'linux'\n", gpus="1")
    assert layer_inputs.extra_requirements(named, base_info(named)) == ()
    files = {"train.py": "if __name__ == '__main__':\n    pass\n"}
    ml = f"base_image = {PYTORCH_BASE}\ngpus_per_node = 1\nbase_provides = nvidia-ml-py\n"
    provided = load_job_spec(write_job(tmp_path / "provided", "job", ml=ml, files=files))
    assert layer_inputs.extra_requirements(provided, base_info(provided)) == ()
    ml = f"base_image = {PYTORCH_BASE}\ngpus_per_node = 1\ngpu_sample_period = 0\n"
    unsampled = load_job_spec(write_job(tmp_path / "unsampled", "job", ml=ml, files=files))
    assert layer_inputs.extra_requirements(unsampled, base_info(unsampled)) == ()


# --- a cache entry that several commands use at once ---------------------------------------------------------------


def cached_entry(tmp_path, monkeypatch):
    """A job and the dependency layer cached for it, last used long ago (a prune would take it)."""
    monkeypatch.setenv("VDK_ML_TRAINING_CACHE_DIR", str(tmp_path / "cache"))
    spec = job_with(tmp_path, "numpy==2.3.0\n")
    base = base_info(spec)
    key = dependency_layer.cache_key(
        b"numpy==2.3.0\n", base, (), spec.index_strategy, uv_install.index_fingerprint(spec.job_dir)
    )
    entry = tmp_path / "cache" / "deps" / key
    entry.mkdir(parents=True)
    (entry / "blob").write_bytes(b"layer")
    meta = {"file": "blob", "size": 5, "digest": "sha256:x", "diff_id": "sha256:y", "packages": [["numpy", "2.3.0"]]}
    (entry / "layer.json").write_text(json.dumps({**meta, "has_scripts": False}))
    os.utime(entry / "layer.json", (1, 1))
    return spec, base, entry


def test_a_prune_between_a_deploy_s_lookup_and_its_push_leaves_the_layer_it_took(tmp_path, monkeypatch):
    spec, base, entry = cached_entry(tmp_path, monkeypatch)
    load = dependency_layer._load

    def load_then_another_command_prunes(*args):
        found = load(*args)
        dependency_layer.prune_cache(max_age_days=0)  # another deploy's prune, right after this one's lookup
        return found

    monkeypatch.setattr(dependency_layer, "_load", load_then_another_command_prunes)
    layer = dependency_layer.dependency_layer(spec, base, Progress())
    assert layer is not None and layer.from_cache
    monkeypatch.setattr(dependency_layer, "_load", load)
    assert dependency_layer.prune_cache(max_age_days=0) == []  # nor later, while this command may push it
    assert layer.blob.path is not None and layer.blob.path.read_bytes() == b"layer"  # what the push reads


def test_a_layer_that_vanishes_before_a_deploy_takes_it_is_built_again(tmp_path, monkeypatch):
    spec, base, entry = cached_entry(tmp_path, monkeypatch)
    real_utime = os.utime

    def gone_first(path, *args, **kwargs):  # another command's prune finished just before this one's touch
        if str(path) == str(entry / "layer.json") and entry.exists():
            os.replace(entry, tmp_path / "pruned")
        return real_utime(path, *args, **kwargs)

    monkeypatch.setattr(os, "utime", gone_first)
    built = []

    def build(spec, requirements, base, entry, key, *args, **kwargs):
        built.append(key)  # uv would start a process: the unit tests' guard refuses it
        blob = layer_tarball.LayerBlob("sha256:n", "sha256:m", 3, entry / "new")
        return dependency_layer.DependencyLayer(blob, (("numpy", "2.3.0"),), False, key, False, {})

    monkeypatch.setattr(dependency_layer, "_build", build)
    layer = dependency_layer.dependency_layer(spec, base, Progress())
    assert built == [entry.name] and layer is not None and not layer.from_cache
