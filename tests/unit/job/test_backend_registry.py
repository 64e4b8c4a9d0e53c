"""The spec knows no backend: the names a job's `backend` key accepts are the entry points backends register
(group vdk.plugin.ml_training.backends), read without loading them, in the order their registrations give."""

from importlib.metadata import EntryPoint

import pytest

from vdk.plugin.ml_training.errors import MLTrainingError
from vdk.plugin.ml_training.job import backend_registry
from vdk.plugin.ml_training.k8s import backends


@pytest.fixture
def registrations(monkeypatch):
    """Replace the installed entry points with `set(...)`'s, as (entry point name, value) pairs."""
    found: list[EntryPoint] = []

    def entry_points(group):
        assert group == backend_registry.ENTRY_POINT_GROUP
        return list(found)

    def register(*pairs):
        found[:] = [EntryPoint(name, value, backend_registry.ENTRY_POINT_GROUP) for name, value in pairs]
        backend_registry.registered.cache_clear()

    monkeypatch.setattr(backend_registry.importlib.metadata, "entry_points", entry_points)
    yield register
    backend_registry.registered.cache_clear()


def test_the_installed_plugin_registers_its_three_backends_in_todays_order():
    assert backend_registry.backend_names() == ("pytorchjob", "trainjob", "job")
    assert backend_registry.backend_choices() == ("auto", "pytorchjob", "trainjob", "job")
    assert backends.NAMES == backend_registry.backend_names()
    assert [backend.name for backend in backends.REGISTRY] == list(backends.NAMES)


def test_each_registration_names_the_backend_object_of_its_name():
    for name, entry_point in backend_registry.registered():
        assert entry_point.load() is backends.get(name)


def test_names_come_from_the_entry_points_in_the_order_of_their_places(registrations):
    registrations(
        ("20-b", "pkg.b:BACKEND"), ("c", "pkg.c:BACKEND"), ("10-a", "pkg.a:BACKEND"), ("3-z", "pkg.z:BACKEND")
    )
    assert backend_registry.backend_names() == ("z", "a", "b", "c")
    assert backend_registry.backend_choices() == ("auto", "z", "a", "b", "c")


def test_a_name_registered_twice_counts_once_in_its_first_place(registrations):
    registrations(("20-a", "other.a:BACKEND"), ("10-a", "pkg.a:BACKEND"), ("15-b", "pkg.b:BACKEND"))
    assert backend_registry.backend_names() == ("a", "b")
    assert dict(backend_registry.registered())["a"].value == "pkg.a:BACKEND"


def test_no_registered_backend_is_an_error_that_says_to_reinstall(registrations):
    registrations()
    with pytest.raises(MLTrainingError) as error:
        backend_registry.backend_choices()
    assert backend_registry.ENTRY_POINT_GROUP in error.value.message and "make install" in error.value.message


def test_the_spec_validates_backend_against_the_registry(registrations, tmp_path):
    from tests.support.jobs import write_job
    from vdk.plugin.ml_training.errors import JobConfigError
    from vdk.plugin.ml_training.job import load_job_spec

    registrations(("10-slurm", "pkg.slurm:BACKEND"))
    assert load_job_spec(write_job(tmp_path, ml={"backend": "slurm"})).backend == "slurm"
    with pytest.raises(JobConfigError) as error:
        load_job_spec(write_job(tmp_path, ml={"backend": "job"}))
    assert "'job' is not one of auto, slurm" in error.value.message
