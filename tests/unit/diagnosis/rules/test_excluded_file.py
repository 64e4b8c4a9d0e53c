"""A file the image leaves out, which any library failed to open: the rule finds the path in the message however
the library wrote it, and names the ignore rule and the fix, as for `open()`."""

import pytest

from tests.support.jobs import write_job
from vdk.plugin.ml_training.diagnosis.evidence import Blame
from vdk.plugin.ml_training.diagnosis.evidence import Evidence
from vdk.plugin.ml_training.diagnosis.evidence import LocalFacts
from vdk.plugin.ml_training.diagnosis.evidence import RankEvidence
from vdk.plugin.ml_training.diagnosis.rules.excluded_file import file_left_out
from vdk.plugin.ml_training.job import load_job_spec
from vdk.plugin.ml_training.source.job_files import Excluded


@pytest.fixture
def job(tmp_path):
    path = write_job(
        tmp_path,
        files={"train.py": "", "data/x.npy": "", "data/x.txt": "", "weights.h5": "", ".gitignore": "data/\n*.h5\n"},
    )
    return load_job_spec(path)


def left_out(relpath: str) -> Excluded | None:
    if relpath.startswith("data/"):
        return Excluded("data/", ".gitignore: data/")
    return Excluded("weights.h5", ".gitignore: *.h5") if relpath == "weights.h5" else None


def evidence(spec, kind: str, message: str) -> Evidence:
    rank = RankEvidence("0", "rank 0", 0, error={"type": kind, "message": message, "traceback": ""})
    facts = LocalFacts(spec=spec, mode="smoke", headline=f"rank 0 failed: {message}", again="run it again",
                       left_out=left_out)  # fmt: skip
    return Evidence((rank,), Blame(rank, None), local=facts)


@pytest.mark.parametrize(
    ("kind", "message", "path", "rule"),
    [
        # open(), pandas, torch.load, np.load: the errno text
        ("FileNotFoundError", "[Errno 2] No such file or directory: 'data/x.npy'", "data/x.npy", "data/"),
        # numpy.loadtxt and genfromtxt: their own words
        ("FileNotFoundError", "data/x.txt not found.", "data/x.txt", "data/"),
        # h5py
        (
            "FileNotFoundError",
            "[Errno 2] Unable to synchronously open file (unable to open file: name = 'weights.h5', errno = 2)",
            "weights.h5",
            "weights.h5",
        ),
        # safetensors (Rust): another error type, the OS's words
        ("SafetensorError", "Error while deserializing header: ./weights.h5 (os error 2)", "weights.h5", "weights.h5"),
    ],
)
def test_the_path_any_library_names_is_found_and_its_ignore_rule_named(job, kind, message, path, rule):
    finding = file_left_out(evidence(job, kind, message))
    assert finding is not None, message
    assert finding.fix.startswith(f"{path} is in the job directory, but its image leaves it out ({rule}: .gitignore")
    assert f"`!{rule}`" in finding.fix and finding.fix.endswith("Then run it again")


def test_an_absolute_path_in_the_job_directory_counts(job):
    message = f"[Errno 2] No such file or directory: '{job.job_dir / 'data' / 'x.npy'}'"
    assert file_left_out(evidence(job, "FileNotFoundError", message)) is not None


@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("FileNotFoundError", "[Errno 2] No such file or directory: 'elsewhere/x.npy'"),  # not the job's
        ("FileNotFoundError", "[Errno 2] No such file or directory: 'train.py'"),  # the image keeps it
        ("ValueError", "could not convert 'data/x.txt' to float"),  # not a missing file
        ("FileNotFoundError", "[Errno 2] No such file or directory: '/etc/data/x.npy'"),  # outside the job
    ],
)
def test_anything_else_is_left_to_other_rules(job, kind, message):
    assert file_left_out(evidence(job, kind, message)) is None
