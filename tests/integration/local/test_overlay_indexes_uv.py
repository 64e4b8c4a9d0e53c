"""A local run's dependency overlay installs what pip would, as the image's layer does (the one uv argument list:
dependencies/uv_install.py): a version only one of two package indexes has, whichever of the two; with
`index_strategy = first-index` the error names that choice, the index that had only the older version and the key
that chooses; a pure-Python package published only as source (antlr4-python3-runtime, which Hydra needs) built into
a wheel; another index (uv's variable, a uv.toml in the job's directory) installs again, never the cached overlay.
Real uv, local indexes and files made here; the overlay prepared as `vdk run` prepares it."""

from __future__ import annotations

import pytest

from tests.support.jobs import write_job
from tests.support.wheels import make_source
from tests.support.wheels import make_wheel
from tests.support.wheels import simple_index
from tests.support.wheels import two_indexes
from tests.support.wheels import wheel_of_installed
from vdk.plugin.ml_training.dependencies.install_errors import FirstIndexError
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.local import overlay

pytestmark = pytest.mark.usefixtures("only_named_indexes")


def prepared(tmp_path, requirements: str, ml: str = "") -> overlay.Overlay:
    job = write_job(tmp_path, "job", ml=ml, files={"train.py": "print('hi')\n", "requirements.txt": requirements})
    ready = overlay.prepare(load_job_spec(job), note=lambda text: None)
    assert ready is not None
    return ready


@pytest.mark.parametrize("newer_on", ["index-url", "extra-index-url"])
def test_a_version_only_one_of_two_indexes_has_goes_into_the_overlay(tmp_path, monkeypatch, newer_on):
    for name, url in two_indexes(tmp_path, "timmy", "1.0", "2.0", newer_on).items():
        monkeypatch.setenv(name, url)
    ready = prepared(tmp_path, "timmy==2.0\n")
    assert ready.packages == (("timmy", "2.0"),)
    assert (ready.path / "timmy" / "__init__.py").read_text() == "__version__ = '2.0'\n"


def test_with_first_index_the_error_names_the_choice_the_index_and_the_key(tmp_path, monkeypatch):
    urls = two_indexes(tmp_path, "timmy", "1.0", "2.0", "index-url")  # uv searches the extra index first
    for name, url in urls.items():
        monkeypatch.setenv(name, url)
    with pytest.raises(FirstIndexError) as raised:
        prepared(tmp_path, "timmy==2.0\n", ml="index_strategy = first-index\n")
    problem, fix = raised.value.problem, raised.value.fix
    assert f"{urls['PIP_EXTRA_INDEX_URL']} is the first package index that has timmy" in problem
    assert "`index_strategy = first-index`" in problem and urls["PIP_INDEX_URL"] in problem
    assert "set `index_strategy = best-match` in [ml-training]" in fix and "vdk run" in fix


def test_a_pure_python_source_distribution_is_built_into_the_overlay(tmp_path):
    files = tmp_path / "files"
    make_source(files, "antlr4-python3-runtime", "4.9.3")
    wheel_of_installed(files, "setuptools")
    ready = prepared(tmp_path, f"--no-index\n--find-links {files}\nantlr4-python3-runtime==4.9.3\n")
    assert ready.packages == (("antlr4-python3-runtime", "4.9.3"),)
    assert (ready.path / "antlr4_python3_runtime" / "__init__.py").is_file()


def test_another_index_installs_again_and_the_first_overlay_is_reused_when_it_is_back(tmp_path, monkeypatch):
    one, two = (simple_index(tmp_path / v, [make_wheel(tmp_path / f"files-{v}", "timmy", v)]) for v in ("1", "2"))
    job = write_job(tmp_path, "job", files={"train.py": "print('hi')\n", "requirements.txt": "timmy\n"})
    spec = load_job_spec(job)

    def prepared_now() -> overlay.Overlay:
        ready = overlay.prepare(spec, note=lambda text: None)
        assert ready is not None
        return ready

    monkeypatch.setenv("UV_DEFAULT_INDEX", one)
    first = prepared_now()
    assert first.packages == (("timmy", "1"),) and not first.from_cache
    monkeypatch.setenv("UV_DEFAULT_INDEX", two)
    second = prepared_now()
    assert second.packages == (("timmy", "2"),) and not second.from_cache and second.path != first.path
    monkeypatch.delenv("UV_DEFAULT_INDEX")
    (job / "uv.toml").write_text(f"[[index]]\nurl = '{one}'\ndefault = true\n")  # uv reads it in the job's directory
    from_file = prepared_now()
    assert from_file.packages == (("timmy", "1"),) and not from_file.from_cache
    (job / "uv.toml").unlink()
    monkeypatch.setenv("UV_DEFAULT_INDEX", one)
    back = prepared_now()
    assert back.from_cache and back.path == first.path and back.packages == (("timmy", "1"),)
