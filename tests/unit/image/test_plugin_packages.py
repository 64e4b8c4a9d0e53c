"""A job with a sweep gets Optuna, grpcio and protobuf in its image's dependency layer (its trial pods' Optuna
client, its study's gRPC storage proxy), and a job whose runs keep an output directory the writer of their
TensorBoard event files, pinned to the versions vdk runs with, beside its own requirements; a job with neither
keeps its requirements.txt as it is."""

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


def board_job(tmp_path, requirements="numpy==2.1.0\n", ml="output_pvc = ml-outputs\n", env=None):
    files = {"train.py": "print('hi')\n", **({"requirements.txt": requirements} if requirements else {})}
    return load_job_spec(write_job(tmp_path, "job", ml=ml, env=env, files=files))


WRITER = f"tensorboardX=={metadata.version('tensorboardX')}"


def test_runs_that_keep_an_output_directory_get_the_event_files_writer_resolved_with_the_jobs_own(tmp_path):
    spec = board_job(tmp_path / "kept")
    listed = RequirementsFile.read(requirements_file(spec))
    assert listed.lines == (f"-r {(spec.job_dir / 'requirements.txt').resolve()}", WRITER)
    assert list(RequirementsFile.read(requirements_file(board_job(tmp_path / "bare", requirements=None))).lines) == [
        WRITER
    ]
    gone = board_job(tmp_path / "gone", ml="")  # without an output claim what a run writes goes with its pods
    assert requirements_file(gone) == gone.job_dir / "requirements.txt"


def test_the_event_files_writer_is_left_out_when_they_are_off_or_the_job_names_it(tmp_path):
    for name, env in (("off", {"VDK_ML_TRAINING_TENSORBOARD": "0"}), ("none", {"VDK_ML_TRAINING_SERIES_SECONDS": "0"})):
        spec = board_job(tmp_path / name, env=env)
        assert requirements_file(spec) == spec.job_dir / "requirements.txt"
    named = board_job(tmp_path / "named", requirements="tensorboardX==2.6\n")
    assert requirements_file(named) == named.job_dir / "requirements.txt"
