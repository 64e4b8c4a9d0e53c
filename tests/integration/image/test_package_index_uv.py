"""The dependency layer finds packages where pip would, with real uv: a requirement found only through
pip.conf (one package in a simple index, one in a directory of wheels) is installed. (How pip's
settings are read and handed to uv: tests/unit/dependencies/test_package_index.py.) And every index is searched as
pip searches them: a version only one of two indexes has is found, whichever of the two it is."""

from __future__ import annotations

import pytest

from tests.support.wheels import make_wheel
from tests.support.wheels import two_indexes
from vdk.plugin.ml_training.image import dependency_layer
from vdk.plugin.ml_training.image.base_facts import base_info
from vdk.plugin.ml_training.image.build_progress import Progress
from vdk.plugin.ml_training.job import load_job_spec


def test_a_requirement_found_only_through_pip_conf_is_installed(tmp_path, monkeypatch):
    """One package in a simple index, one in a directory of wheels, both named only in pip.conf."""
    index_wheels = tmp_path / "index-wheels"
    wheel = make_wheel(index_wheels, "tinydep", "1.0", requires=("helperdep>=2",))
    simple = tmp_path / "simple" / "tinydep"
    simple.mkdir(parents=True)
    (simple / "index.html").write_text(f'<html><body><a href="{wheel.as_uri()}">{wheel.name}</a></body></html>\n')
    make_wheel(tmp_path / "find-links", "helperdep", "2.0")
    config = tmp_path / "pip.conf"
    config.write_text(
        f"[global]\nindex-url = {(tmp_path / 'simple').as_uri()}\nfind-links = {tmp_path / 'find-links'}\n"
    )
    monkeypatch.setenv("PIP_CONFIG_FILE", str(config))
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    job = tmp_path / "job"
    job.mkdir()
    (job / "config.ini").write_text(
        "[job]\ntype = ml-training\n[ml-training]\nbase_image = python:3.11-slim\ngpus_per_node = 0\n"
    )
    (job / "train.py").write_text("if __name__ == '__main__':\n    pass\n")
    (job / "requirements.txt").write_text("tinydep\n")
    spec = load_job_spec(job)
    layer = dependency_layer.dependency_layer(spec, base_info(spec), Progress())
    assert layer.packages == (("helperdep", "2.0"), ("tinydep", "1.0"))


@pytest.mark.usefixtures("only_named_indexes")
@pytest.mark.parametrize("newer_on", ["index-url", "extra-index-url"])
def test_a_version_only_one_of_two_indexes_has_is_installed_as_pip_would(tmp_path, monkeypatch, newer_on):
    """uv alone takes a package from the first index that has it (pip's extra index first): the other's newer
    version was hidden, and the error blamed the requirement."""
    for name, url in two_indexes(tmp_path, "timmy", "1.0", "2.0", newer_on).items():
        monkeypatch.setenv(name, url)
    job = tmp_path / "job"
    job.mkdir()
    (job / "config.ini").write_text(
        "[job]\ntype = ml-training\n[ml-training]\nbase_image = python:3.11-slim\ngpus_per_node = 0\n"
    )
    (job / "train.py").write_text("if __name__ == '__main__':\n    pass\n")
    (job / "requirements.txt").write_text("timmy==2.0\n")
    spec = load_job_spec(job)
    layer = dependency_layer.dependency_layer(spec, base_info(spec), Progress())
    assert layer.packages == (("timmy", "2.0"),)
    assert not layer.lock.error and layer.lock.hashes["timmy"]  # the lock finds it where the install did
