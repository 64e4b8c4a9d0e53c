"""A job with a sweep gets Optuna, grpcio and protobuf in its image's dependency layer (its trial pods' Optuna
client, its study's gRPC storage proxy), pinned to the versions vdk runs with, beside its own requirements; a
job without a sweep keeps its requirements.txt as it is."""

from importlib import metadata

from tests.support.jobs import write_job
from vdk.plugin.ml_training.image.layer_inputs import requirements_file
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source.requirements import RequirementsFile

SWEEP = "\n[ml-training.sweep]\nlr = 1e-3, 1e-2\nmetric = loss\n"
PINNED = [f"{name}=={metadata.version(name)}" for name in ("optuna", "grpcio", "protobuf")]


def job(tmp_path, requirements=None, sweep=True):
    files = {"train.py": "print('hi')\n", **({"requirements.txt": requirements} if requirements else {})}
    ml = {"args": "--lr ${lr}" if sweep else "--lr 1"}
    return load_job_spec(write_job(tmp_path, "hp", ml=ml, extra=SWEEP if sweep else "", files=files))


def test_a_sweeps_layer_asks_for_its_own_requirements_and_the_pinned_sweep_packages(tmp_path):
    spec = job(tmp_path, "numpy==2.1.0\n")
    path = requirements_file(spec)
    listed = RequirementsFile.read(path)
    assert listed.lines == (f"-r {(spec.job_dir / 'requirements.txt').resolve()}", *PINNED)
    assert set(listed.names) == {"numpy", "optuna", "grpcio", "protobuf"}  # the job's own through the include
    assert path.name.endswith("requirements.txt") and path != spec.job_dir / "requirements.txt"


def test_a_change_of_the_jobs_own_requirements_is_another_file_so_another_layer(tmp_path):
    spec = job(tmp_path, "numpy==2.1.0\n")
    before = requirements_file(spec)
    (spec.job_dir / "requirements.txt").write_text("numpy==2.2.0\n")
    after = requirements_file(spec)
    assert before != after and before.read_text() != after.read_text()


def test_a_sweep_without_requirements_gets_the_sweep_packages_and_a_job_without_a_sweep_nothing_more(tmp_path):
    assert list(RequirementsFile.read(requirements_file(job(tmp_path / "a"))).lines) == PINNED
    plain = job(tmp_path / "b", "numpy==2.1.0\n", sweep=False)
    assert requirements_file(plain) == plain.job_dir / "requirements.txt"
    assert requirements_file(job(tmp_path / "c", sweep=False)) is None
