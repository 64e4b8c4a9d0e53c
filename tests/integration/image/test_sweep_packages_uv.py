"""A sweep's image holds the Optuna client vdk adds to the job's requirements (issue 34, item 3), with real uv against
a local package index: when the index lacks the version vdk pins (the one it runs with here), the error says that
the package is vdk's addition, not the job's requirement, and how to pin it (never a file name of vdk's cache); and
a job that names the package in its requirements.txt gets its own version. Resolved against two indexes where only
one has vdk's version, it is found as pip would find it, whichever of the two has it."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

import pytest

from tests.support.wheels import make_wheel
from tests.support.wheels import simple_index
from vdk.plugin.ml_training.dependencies.install_errors import AddedRequirementError
from vdk.plugin.ml_training.image import dependency_layer
from vdk.plugin.ml_training.image.base_facts import base_info
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.job import load_job_spec


def sweep_job(root: Path, requirements: str) -> Path:
    job = root / "job"
    job.mkdir()
    (job / "config.ini").write_text(
        "[job]\ntype = ml-training\n[ml-training]\nbase_image = python:3.11-slim\ngpus_per_node = 0\n"
        "args = --lr ${lr}\n"
        "\n[ml-training.sweep]\nlr = loguniform(1e-4, 1e-1)\nmetric = loss\ntrials = 4\n"
    )
    (job / "train.py").write_text("if __name__ == '__main__':\n    print('loss 1.0')\n")
    (job / "requirements.txt").write_text(requirements)
    return job


@pytest.fixture
def index_without_vdks_optuna(tmp_path, monkeypatch):
    """pip.conf's only place: a directory of wheels with an old optuna, and grpcio and protobuf at vdk's versions."""
    wheels = tmp_path / "wheels"
    make_wheel(wheels, "optuna", "0.0.1")
    for package in ("grpcio", "protobuf"):
        make_wheel(wheels, package, metadata.version(package))
    (tmp_path / "simple").mkdir()
    config = tmp_path / "pip.conf"
    config.write_text(f"[global]\nindex-url = {(tmp_path / 'simple').as_uri()}\nfind-links = {wheels}\n")
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    for name in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "UV_INDEX_URL", "UV_EXTRA_INDEX_URL"):
        monkeypatch.delenv(name, raising=False)


def test_vdks_own_optuna_pin_missing_from_the_index_is_named_as_vdks_with_how_to_pin_it(
    tmp_path, index_without_vdks_optuna
):
    spec = load_job_spec(sweep_job(tmp_path, "protobuf\n"))
    with pytest.raises(AddedRequirementError) as raised:
        dependency_layer.dependency_layer(spec, base_info(spec), Progress())
    problem, fix = raised.value.problem, raised.value.fix
    assert f"`optuna=={metadata.version('optuna')}` cannot be installed" in problem
    assert "not a requirement of yours, vdk adds it (a sweep's trials report to its Optuna study with it)" in problem
    assert "-requirements.txt" not in problem + fix  # not the name of vdk's cache file
    assert "name optuna in the job's requirements.txt" in fix and "`optuna==VERSION`" in fix


def test_a_sweep_that_pins_optuna_itself_gets_its_version(tmp_path, index_without_vdks_optuna):
    spec = load_job_spec(sweep_job(tmp_path, "optuna==0.0.1\n"))
    layer = dependency_layer.dependency_layer(spec, base_info(spec), Progress())
    assert ("optuna", "0.0.1") in layer.packages
    assert ("grpcio", metadata.version("grpcio")) in layer.packages  # vdk's own pins of what the job does not name


@pytest.mark.usefixtures("only_named_indexes")
@pytest.mark.parametrize("wanted_on", ["index-url", "extra-index-url"])
def test_a_sweep_s_packages_come_from_whichever_of_two_indexes_has_vdk_s_version(tmp_path, monkeypatch, wanted_on):
    """Both indexes have optuna, only one at the version vdk pins; the other an old one, and grpcio and protobuf."""
    wanted = metadata.version("optuna")
    other = "extra-index-url" if wanted_on == "index-url" else "index-url"
    files = {
        wanted_on: [make_wheel(tmp_path / wanted_on, "optuna", wanted)],
        other: [make_wheel(tmp_path / other, name, metadata.version(name)) for name in ("grpcio", "protobuf")],
    }
    files[other].append(make_wheel(tmp_path / other, "optuna", "0.0.1"))
    urls = {setting: simple_index(tmp_path / setting / "simple", listed) for setting, listed in files.items()}
    monkeypatch.setenv("PIP_INDEX_URL", urls["index-url"])
    monkeypatch.setenv("PIP_EXTRA_INDEX_URL", urls["extra-index-url"])
    spec = load_job_spec(sweep_job(tmp_path, ""))
    layer = dependency_layer.dependency_layer(spec, base_info(spec), Progress())
    assert ("optuna", wanted) in layer.packages
    assert ("protobuf", metadata.version("protobuf")) in layer.packages
