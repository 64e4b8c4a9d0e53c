"""The code layer's manifest: the files the image holds (the ignore rules apply), each by the hash of its
content; a change of one file changes its hash and nothing else."""

from tests.support.jobs import write_job
from vdk.plugin.ml_training.image.code_manifest import code_manifest


def test_the_manifest_holds_the_code_layer_s_files_by_content(tmp_path):
    job = write_job(tmp_path, "job", files={"train.py": "print(1)\n", "lib/util.py": "X = 1\n", ".env": "SECRET=1"})
    first = code_manifest(job)
    assert set(first) == {"train.py", "lib/util.py", "config.ini"}  # .env is never in an image
    (job / "lib" / "util.py").write_text("X = 2\n")
    second = code_manifest(job)
    assert second["lib/util.py"] != first["lib/util.py"]
    assert {k: v for k, v in second.items() if k != "lib/util.py"} == {
        k: v for k, v in first.items() if k != "lib/util.py"
    }


def test_a_file_set_found_already_is_hashed_as_found(tmp_path):
    from vdk.plugin.ml_training.source.job_files import scan_job_dir

    job = write_job(tmp_path, "job", files={"train.py": "print(1)\n"})
    files = scan_job_dir(job)
    (job / "later.py").write_text("print(2)\n")
    assert code_manifest(files) == {k: v for k, v in code_manifest(job).items() if k != "later.py"}
    assert set(code_manifest(files)) == {"train.py", "config.ini"}
